"""Upgrades without downtime: code runs against its own schema and the next one.

While the next release's migration runs, this release keeps serving every shard, those
migrated included (with the pools it had open before). The next release serves each
shard from the moment it is migrated, answers ``503 store-unavailable`` for a shard
still behind, and a process of it does not report ready until none is behind (a rolling
update keeps the old pods meanwhile); once ready, a shard found behind is that shard's
problem only. A shard migrated past what a release runs against (a contraction) is
refused, as a shard of its own.

The next release is simulated: this release's migrations and one more, written the way
the expand/contract rule of docs/operations.md asks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from conftest import TEAM_TOKEN, TEST_SHARDS, WORKER_TOKEN, served
from conftest import test_tokens as tokens

from tickwork.api.services import Services
from tickwork.core import hashing
from tickwork.core.settings import ApiSettings
from tickwork.core.shards import Shard, ShardMap
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.engine.shard_health import ShardHealth
from tickwork.store import database, migrate
from tickwork.store.database import Database

STORE_UNAVAILABLE = "https://tickwork.dev/problems/store-unavailable"
CURRENT = migrate.migrations()
LATEST = CURRENT[-1].version
# What a next release may add: columns (nullable or with a default), an index, a table.
NEXT = migrate.Migration(
    LATEST + 1,
    "next_release",
    """
    ALTER TABLE definitions ADD COLUMN owner text;
    ALTER TABLE live_runs ADD COLUMN trace_id text;
    ALTER TABLE finished_runs ADD COLUMN trace_id text;
    ALTER TABLE enqueue_buckets ADD COLUMN refills bigint NOT NULL DEFAULT 0;
    CREATE INDEX live_runs_trace ON live_runs (trace_id) WHERE trace_id IS NOT NULL;
    CREATE TABLE job_notes (tenant text NOT NULL, job text NOT NULL, note text NOT NULL);
    """,
)
# And the release after it contracts: the code of this release does not run against it.
CONTRACT = migrate.Migration(
    LATEST + 2,
    "contract",
    f"-- compatible-from: {LATEST + 1}\nALTER TABLE definitions DROP COLUMN owner;",
)
JOBS = {hashing.shard_of("acme", f"job-{n}", TEST_SHARDS): f"job-{n}" for n in range(40)}
SPEC = {"retry": {"maxAttempts": 1}}
SUCCEEDED = {"outcome": "succeeded"}
FAILED = {"outcome": "failed", "error": {"message": "boom", "retryable": False}}


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def release(monkeypatch: pytest.MonkeyPatch, *extra: migrate.Migration) -> Iterator[None]:
    """The code of a release that ships ``extra`` after this release's migrations."""
    with monkeypatch.context() as patch:
        patch.setattr(migrate, "migrations", lambda: (*CURRENT, *extra))
        yield


async def migrate_shards(shards: list[Shard], *extra: migrate.Migration) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(migrate, "migrations", lambda: (*CURRENT, *extra))
        for shard in shards:
            conn = await database.connect(shard)
            try:
                await migrate.migrate_shard(conn, shard, TEST_SHARDS)
            finally:
                await conn.close()


@contextlib.asynccontextmanager
async def dispatcher(shard_map: ShardMap) -> AsyncIterator[tuple[Services, str]]:
    """A dispatcher process: pools of its own, the API on 127.0.0.1."""
    async with Database(shard_map) as db:
        services = Services(
            engine=Installation.over(db),
            authenticator=tokens(),
            metrics=Metrics(),
            settings=ApiSettings(auth_failure_rate=0),
        )
        async with served(services) as url:
            yield services, url


@contextlib.asynccontextmanager
async def clients(url: str) -> AsyncIterator[tuple[httpx.AsyncClient, ...]]:
    async with (
        httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TEAM_TOKEN}"}) as team,
        httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {WORKER_TOKEN}"}) as w,
        httpx.AsyncClient(base_url=url) as anyone,
    ):
        yield team, w, anyone


def ok(response: httpx.Response, *statuses: int) -> Any:
    assert response.status_code in (statuses or (200,)), (response.request.url, response.text)
    return response.json()


async def exercise(
    team: httpx.AsyncClient, worker: httpx.AsyncClient, shards: list[int], *, lists: bool = True
) -> None:
    """Every call of a team and of its workers, on a job of each of ``shards`` (and,
    with ``lists``, the lists that merge every shard)."""
    for shard in shards:
        job = JOBS[shard]
        ok(await team.put(f"/v1/jobs/{job}", json=SPEC), 200, 201)
        ok(await team.get(f"/v1/jobs/{job}"))
        ok(await team.post(f"/v1/jobs/{job}:pause"))
        ok(await team.post(f"/v1/jobs/{job}:resume"))
        ok(await team.post(f"/v1/jobs/{job}/runs", json={}), 201)
        ok(await team.post(f"/v1/jobs/{job}/runs:batch", json={"runs": [{}, {}]}))
        later = ok(await team.post(f"/v1/jobs/{job}/runs", json={"delaySeconds": 600}), 201)
        ok(await team.get(f"/v1/runs/{later['runId']}"))
        ok(await team.post(f"/v1/runs/{later['runId']}:cancel"))
        ok(await team.get(f"/v1/jobs/{job}/runs"))
    leases = ok(await worker.post("/v1/lease", json={"queues": ["default"], "max": 100}))["leases"]
    assert {shard_of_run(lease["runId"]) for lease in leases} == set(shards)
    items = [{"runId": lease["runId"], "fencingToken": lease["fencingToken"]} for lease in leases]
    ok(await worker.post("/v1/runs:heartbeat", json={"items": items}))
    replayed, discarded, single, *rest = items
    token = {"fencingToken": single["fencingToken"]}
    ok(await worker.post(f"/v1/runs/{single['runId']}/heartbeat", json=token))
    ok(await worker.post(f"/v1/runs/{single['runId']}/complete", json=token | SUCCEEDED))
    fail = [item | FAILED for item in (replayed, discarded)]
    done = ok(
        await worker.post("/v1/runs:complete", json={"items": fail + [i | SUCCEEDED for i in rest]})
    )
    assert [item["state"] for item in done["items"]] == ["dead"] * 2 + ["succeeded"] * len(rest)
    dead: set[str] = set()
    for shard in shards if not lists else ():
        dead |= {
            item["runId"] for item in ok(await team.get(f"/v1/dlq?job={JOBS[shard]}"))["items"]
        }
        ok(await team.get(f"/v1/audit?job={JOBS[shard]}"))
    if lists:
        dead |= {item["runId"] for item in ok(await team.get("/v1/dlq"))["items"]}
        ok(await team.get("/v1/jobs"))
        ok(await team.get("/v1/audit"))
    assert {replayed["runId"], discarded["runId"]} <= dead
    ok(await team.post(f"/v1/dlq/{replayed['runId']}:replay"))
    ok(await team.post(f"/v1/dlq/{discarded['runId']}:discard"))
    # The replayed run, leased and done: nothing ready is left for the next exercise.
    again = ok(await worker.post("/v1/lease", json={"queues": ["default"], "max": 100}))["leases"]
    assert [lease["runId"] for lease in again] == [replayed["runId"]]
    finish = [{"runId": again[0]["runId"], "fencingToken": again[0]["fencingToken"]} | SUCCEEDED]
    ok(await worker.post("/v1/runs:complete", json={"items": finish}))


def shard_of_run(run_id: str) -> int:
    return int(run_id[1:].split("-")[0])


async def test_this_release_serves_shards_the_next_one_migrated(shard_map: ShardMap) -> None:
    """Pools opened before the migration and processes started after it alike."""
    migrated = [0, 1]
    async with dispatcher(shard_map) as (services, url), clients(url) as (team, worker, anyone):
        await exercise(team, worker, migrated)  # its statements prepared, its pools warm
        await migrate_shards([shard_map[n] for n in migrated], NEXT)
        assert ok(await anyone.get("/readyz")) == {"status": "ready", "shards": TEST_SHARDS}
        await exercise(team, worker, migrated)
        for shard in migrated:
            assert await Scheduler(services.engine.database).tick(shard) is not None
    async with dispatcher(shard_map) as (_, url), clients(url) as (team, worker, anyone):
        assert ok(await anyone.get("/readyz")) == {"status": "ready", "shards": TEST_SHARDS}
        for shard in migrated:
            ok(await team.post(f"/v1/jobs/{JOBS[shard]}/runs", json={}), 201)


async def test_the_next_release_serves_each_shard_once_it_is_migrated(
    shard_map: ShardMap, monkeypatch: pytest.MonkeyPatch
) -> None:
    await migrate_shards([shard_map[0]], NEXT)
    behind = [1, 2, 3]
    clock = Monotonic()
    with release(monkeypatch, NEXT):
        async with dispatcher(shard_map) as (services, url), clients(url) as (team, w, anyone):
            # The worker path leaves a shard whose claim failed alone for a backoff:
            # on the test's clock.
            services.dispatcher.health = ShardHealth(monotonic=clock)
            # Not ready while shards wait for the migration: the old pods serve them.
            readiness = await anyone.get("/readyz")
            assert readiness.status_code == 503
            assert readiness.json() == {
                "status": "unavailable",
                "problems": [
                    f"shard {n}: schema {LATEST}, code needs {LATEST + 1}" for n in behind
                ],
                "down": behind,
            }
            metrics = services.metrics.render().decode()
            assert 'tickwork_shard_up{shard="0"} 1.0' in metrics
            assert 'tickwork_shard_up{shard="1"} 0.0' in metrics
            # Yet it serves the migrated shard already, and refuses the others' calls.
            await exercise(team, w, [0], lists=False)
            refused = await team.put(f"/v1/jobs/{JOBS[1]}", json={})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["type"] == STORE_UNAVAILABLE
            assert f"schema {LATEST}, code needs {LATEST + 1}" in refused.json()["detail"]

            await migrate_shards([shard_map[n] for n in behind], NEXT)
            clock.now += 60  # every backoff over
            assert ok(await anyone.get("/readyz")) == {"status": "ready", "shards": TEST_SHARDS}
            await exercise(team, w, [1])

            # Once ready, a shard found behind (restored from an older backup) is that
            # shard's problem only.
            conn = await database.connect(shard_map[2])
            try:
                await conn.execute("DELETE FROM schema_version WHERE version = $1", NEXT.version)
            finally:
                await conn.close()
            assert ok(await anyone.get("/readyz")) == {
                "status": "degraded",
                "shards": TEST_SHARDS,
                "problems": [f"shard 2: schema {LATEST}, code needs {LATEST + 1}"],
                "down": [2],
            }


async def test_a_shard_contracted_past_this_release_is_refused_alone(
    shard_map: ShardMap,
) -> None:
    await migrate_shards([shard_map[3]], NEXT, CONTRACT)
    async with dispatcher(shard_map) as (_, url), clients(url) as (team, worker, anyone):
        problem = (
            f"shard 3: schema {LATEST + 2} needs code of schema {LATEST + 1}, code is {LATEST}"
        )
        assert ok(await anyone.get("/readyz")) == {
            "status": "degraded",
            "shards": TEST_SHARDS,
            "problems": [problem],
            "down": [3],
        }
        await exercise(team, worker, [0], lists=False)
        refused = await team.get(f"/v1/jobs/{JOBS[3]}")
        assert refused.status_code == 503 and refused.json()["type"] == STORE_UNAVAILABLE
