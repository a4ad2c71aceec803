"""Shards on PostgreSQL servers of their own (server processes, not databases of one).

- Two servers, a shard on each: the API and two scheduler replicas (one a ``tickwork
  scheduler`` process given a ``--database-url`` per shard) split the shards; kill -9
  of the process hands its shard to the other; then ``tickwork reshard`` makes four
  shards, each new one on the other server than the shard it splits from, and leases
  held across it, old run ids and the scheduling of every shard keep working.
- A shard whose primary has a synchronous streaming standby (reference design 9.1):
  under load the primary is stopped immediately, comes back as a read-only standby
  (as a failover manager brings a failed primary back) and the standby is promoted.
  Every role finds the new primary through the shard's multi-host URL
  (``target_session_attrs=read-write``) by itself; no enqueue, lease or completion a
  client was told of is lost; while no server of the shard takes writes its calls
  are outages (503), never errors; the shard on the other server goes on meanwhile.

Every wait is on an answer (pg_ctl -w, a query, the API, a role's probe) with a
deadline. The roles' pools and listeners have their defaults, as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from conftest import TEAM_TOKEN, WORKER_TOKEN, scratch_database, served
from conftest import test_tokens as make_tokens
from coordination.replicas import Replica
from kube import emulator
from polling import eventually
from scheduledjobs.conftest import observed, scheduled_job

from faults.conftest import operating, scheduling
from faults.postgres import PostgresProcess
from faults.servers import Primary, Standby, copy_of, in_sync, multi_host_url
from tickwork.api.services import Services
from tickwork.cli.probes import Probes
from tickwork.core import hashing
from tickwork.core.settings import ApiSettings
from tickwork.core.shards import ShardMap
from tickwork.engine import installation
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

pytestmark = pytest.mark.timeout(90)

TENANT = "acme"  # its enqueue-rate bucket is on shard 1 of 2, and of 4
ROLE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}


def name_on(shard: int, count: int, prefix: str = "job", tenant: str = TENANT) -> str:
    """The first ``prefix-N`` whose job lives on ``shard`` of ``count``."""
    return next(
        f"{prefix}-{n}"
        for n in itertools.count()
        if hashing.shard_of(tenant, f"{prefix}-{n}", count) == shard
    )


@pytest.fixture(scope="module")
def template() -> Iterator[PostgresProcess]:
    """An initialised server, never started: the servers below are copies of it."""
    server = PostgresProcess()
    try:
        yield server.init()
    finally:
        server.destroy()


@pytest.fixture(scope="module")
def servers(template: PostgresProcess) -> Iterator[tuple[PostgresProcess, PostgresProcess]]:
    """Two PostgreSQL servers: two processes, two data folders, two ports."""
    made: list[PostgresProcess] = []
    try:
        for _ in range(2):
            made.append(PostgresProcess())
            copy_of(template, made[-1]).start()
        yield made[0], made[1]
    finally:
        for server in made:
            server.destroy()


@pytest.fixture
async def pair(template: PostgresProcess) -> AsyncIterator[tuple[Primary, Standby]]:
    """A primary and its synchronous standby, running and in sync."""
    primary = Primary()
    standby: Standby | None = None
    try:
        copy_of(template, primary).streaming().start()
        standby = Standby(primary)
        standby.init().start()
        await in_sync(primary)
        yield primary, standby
    finally:
        made = [server for server in (primary, standby) if server is not None]
        await asyncio.gather(*(asyncio.to_thread(server.destroy) for server in made))


# The roles, wired as their commands wire them, in this process.


@contextlib.asynccontextmanager
async def dispatcher(shard_map: ShardMap) -> AsyncIterator[tuple[str, Services]]:
    """``tickwork dispatcher`` served on 127.0.0.1 (without the canary worker)."""
    async with installation.opened(shard_map) as engine:
        services = Services(
            engine=engine,
            authenticator=make_tokens(),
            metrics=Metrics(),
            settings=ApiSettings(auth_failure_rate=0),
        )
        engine.dispatcher.wakeups.test_signals.init()
        async with served(services) as url:
            yield url, services


@contextlib.asynccontextmanager
async def scheduler(shard_map: ShardMap, identity: str = "solo") -> AsyncIterator[Probes]:
    """``tickwork scheduler --coordination postgres --lease-seconds 2``, passing every
    0.1 s."""
    async with (
        Database(shard_map) as database,
        scheduling(database, identity=identity) as (_, probes),
    ):
        yield probes


@contextlib.asynccontextmanager
async def operator(shard_map: ShardMap, kube: emulator.Emulator) -> AsyncIterator[Jobs]:
    """``tickwork operator`` for the namespace ``default`` of the emulated API."""
    async with Database(shard_map) as database, operating(database, kube) as running:
        yield running.jobs


def database_urls(urls: list[str]) -> list[str]:
    """One ``--database-url`` per shard, in shard order."""
    return [argument for url in urls for argument in ("--database-url", url)]


async def start_scheduler(
    identity: str, urls: list[str], workdir: Path, started: list[Replica]
) -> Replica:
    """``tickwork scheduler`` in a process of its own (added to ``started`` at once),
    coordinated through the shards' own tables with 2 s leases."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tickwork", "scheduler", *database_urls(urls)),
        *("--coordination", "postgres", "--identity", identity, "--lease-seconds", "2"),
        *("--interval", "0.2", "--health-host", "127.0.0.1", "--health-port", "0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=ROLE_ENV,
        cwd=workdir,
    )
    replica = Replica(identity, process)
    started.append(replica)
    replica.reader = asyncio.create_task(replica._read())
    replica.probes = (await replica.line(r"probes on (http://\S+)", within=30)).group(1)
    return replica


async def stop_processes(replicas: list[Replica]) -> None:
    for replica in replicas:
        if replica.process.returncode is None:
            replica.kill()
            await replica.process.wait()
        if replica.reader is not None:
            await replica.reader


@dataclass
class Clients:
    """A team and a worker of the tenant, calling the API."""

    team: httpx.AsyncClient
    worker: httpx.AsyncClient

    async def enqueue(self, names: list[str], **body: Any) -> dict[str, str]:
        """One run of each job: run id -> job."""
        made = {}
        for name in names:
            answer = await self.team.post(f"/v1/jobs/{name}/runs", json=body)
            assert answer.status_code == 201, answer.text
            made[answer.json()["runId"]] = name
        return made

    async def lease(self, run_ids: set[str], queue: str = "default") -> dict[str, int]:
        """Lease until each of ``run_ids`` is (they are ready, or a scheduler makes
        them ready meanwhile); their fencing tokens."""
        tokens: dict[str, int] = {}

        async def leased() -> bool:
            answer = await self.worker.post(
                "/v1/lease",
                json={"queues": [queue], "max": 100, "waitSeconds": 1, "leaseSeconds": 600},
            )
            assert answer.status_code == 200, answer.text
            tokens.update((i["runId"], i["fencingToken"]) for i in answer.json()["leases"])
            return run_ids <= tokens.keys()

        await eventually(leased, within=20, every=0, what=f"runs {sorted(run_ids)} leased")
        assert tokens.keys() == run_ids, "a run nobody enqueued was leased"
        return tokens

    async def complete(self, tokens: dict[str, int]) -> dict[str, str]:
        """Complete the leases: the state (or problem) each item is answered."""
        items = [
            {"runId": run_id, "fencingToken": token, "outcome": "succeeded"}
            for run_id, token in tokens.items()
        ]
        answer = await self.worker.post("/v1/runs:complete", json={"items": items})
        assert answer.status_code == 200, answer.text
        return {i["runId"]: i.get("state") or i["problem"]["type"] for i in answer.json()["items"]}

    async def heartbeat(self, tokens: dict[str, int]) -> list[dict[str, Any]]:
        items = [
            {"runId": run_id, "fencingToken": token, "extendSeconds": 600}
            for run_id, token in tokens.items()
        ]
        answer = await self.worker.post("/v1/runs:heartbeat", json={"items": items})
        assert answer.status_code == 200, answer.text
        return list(answer.json()["items"])

    async def run_through(self, names: list[str], queue: str = "default", **body: Any) -> None:
        """Enqueue a run of each job, lease and complete them all."""
        made = await self.enqueue(names, **body)
        states = await self.complete(await self.lease(set(made), queue))
        assert states == dict.fromkeys(made, "succeeded")


@contextlib.asynccontextmanager
async def clients_of(url: str) -> AsyncIterator[Clients]:
    async with (
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TEAM_TOKEN}"}, timeout=30
        ) as team,
        httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {WORKER_TOKEN}"}, timeout=30
        ) as worker,
    ):
        yield Clients(team, worker)


async def role_sessions(servers: tuple[PostgresProcess, ...]) -> int:
    """Sessions of tickwork roles on the servers (by their ``application_name``)."""
    count = 0
    for server in servers:
        connection = await asyncpg.connect(server.url)
        try:
            count += await connection.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'tickwork-%'"
            )
        finally:
            await connection.close()
    return count


# Four shards after the reshard, two on each server: shard k + 2, split from shard k,
# on the other server than shard k, so every job the reshard moves changes servers.
SERVER_OF_SHARD = (0, 1, 1, 0)


async def test_roles_on_two_servers_fail_over_and_reshard_across_them(
    servers: tuple[PostgresProcess, PostgresProcess], tmp_path: Path
) -> None:
    processes: list[Replica] = []
    async with contextlib.AsyncExitStack() as stack:
        urls = [
            await stack.enter_async_context(
                scratch_database(servers[server].url, f"tickwork_shard{shard}")
            )
            for shard, server in enumerate(SERVER_OF_SHARD)
        ]
        stack.push_async_callback(stop_processes, processes)  # before the databases go
        before, after = ShardMap.from_dsns(urls[:2]), ShardMap.from_dsns(urls)
        await installation.migrate(before)
        # A job for each shard to come: jobs 0 and 2 on shard 0 now, 1 and 3 on shard
        # 1; the reshard moves jobs 2 and 3 to the other server.
        names = [name_on(shard, 4) for shard in range(4)]

        # Two scheduler replicas: one a process of its own, given a --database-url per
        # shard; one in this process (the same wiring, a shorter start).
        starting = asyncio.create_task(start_scheduler("s2", urls[:2], tmp_path, processes))
        stack.callback(starting.cancel)
        async with (
            dispatcher(before) as (url, _),
            clients_of(url) as clients,
            scheduler(before, "s1") as s1,
        ):
            for name in names:
                assert (await clients.team.put(f"/v1/jobs/{name}", json={})).status_code == 201
            # A worker holds a lease of each job across the reshard.
            first = await clients.enqueue(names)
            held = await clients.lease(set(first))
            s2 = await starting

            async def split() -> bool:
                return sorted([s1.state()["owned"], (await s2.ready())["owned"]]) == [[0], [1]]

            await eventually(split, within=20, what="s1 and s2 owning a shard each")
            # Runs falling due on either server are made ready by their shard's owner.
            await clients.run_through(names, delaySeconds=0.2)

            # kill -9 of s2: s1 takes its shard over once the lease has run out, and
            # makes ready the runs that fell due meanwhile.
            s2.kill()
            await s2.process.wait()
            await clients.run_through(names, delaySeconds=0.2)
            await eventually(lambda: s1.state()["owned"] == [0, 1], what="s1 owning both")
        # Every role is stopped for the reshard; the worker keeps its leases.

        async def nobody_connected() -> bool:
            return await role_sessions(servers) == 0

        await eventually(nobody_connected, what="every role's sessions ended")
        resharded = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tickwork", "reshard", "--to", "4", *database_urls(urls)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**ROLE_ENV, "TICKWORK_COORDINATION": "postgres"},
            check=False,
        )
        assert resharded.returncode == 0, resharded.stderr
        assert "start the roles with" in resharded.stdout, resharded.stdout
        for shard in (2, 3):
            connection = await asyncpg.connect(urls[shard])
            try:
                moved = await connection.fetchval(
                    f"SELECT count(*) FROM tickwork_shard_{shard}.definitions WHERE name = $1",
                    names[shard],
                )
            finally:
                await connection.close()
            assert moved == 1, f"{names[shard]} is not in shard {shard}'s database"

        async with (
            dispatcher(after) as (url, _),
            clients_of(url) as clients,
            scheduler(after) as probes,
        ):
            # The leases held across the reshard complete with their old run ids and
            # fencing tokens; a moved run's old id answers with its new one.
            assert await clients.complete(held) == dict.fromkeys(held, "succeeded")
            for run_id in held:
                answer = await clients.team.get(f"/v1/runs/{run_id}")
                assert answer.status_code == 200, answer.text
                now_as = f"r{names.index(first[run_id])}-{run_id.split('-')[1]}"
                assert (answer.json()["runId"], answer.json()["state"]) == (now_as, "succeeded")
            # The scheduler of four shards makes the due runs of each ready.
            await clients.run_through(names, delaySeconds=0.2)
            await eventually(lambda: probes.state()["owned"] == [0, 1, 2, 3], what="all owned")


HA, OTHER = 0, 1  # the shard with a standby, and the shard on the other server


@dataclass
class Load:
    """A team enqueueing and workers leasing and completing, through the API; what
    each was answered."""

    shard_of: dict[str, int]  # job -> shard
    enqueued: dict[str, float] = field(default_factory=dict)  # run id -> when (201)
    leased: dict[str, int] = field(default_factory=dict)  # run id -> fencing token
    completed: dict[str, float] = field(default_factory=dict)  # run id -> when (succeeded)
    unavailable: list[tuple[int, float]] = field(default_factory=list)  # shard, when (503)
    wrong: list[Any] = field(default_factory=list)  # answers no outage explains
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def count(self, what: dict[str, float], shard: int, after: float) -> int:
        prefix = f"r{shard}-"
        return sum(1 for run_id, at in what.items() if at > after and run_id.startswith(prefix))

    def refused(self, shard: int, after: float) -> bool:
        return any(s == shard and at > after for s, at in self.unavailable)

    async def enqueue(self, team: httpx.AsyncClient, name: str) -> None:
        while not self.stop.is_set():
            answer = await team.post(f"/v1/jobs/{name}/runs", json={})
            if answer.status_code == 201:
                self.enqueued[answer.json()["runId"]] = time.monotonic()
            elif answer.status_code == 503:
                self.unavailable.append((self.shard_of[name], time.monotonic()))
            else:
                self.wrong.append(("enqueue", name, answer.status_code, answer.text))

    async def work(self, worker: httpx.AsyncClient) -> None:
        """Lease, and complete what it holds; what a call could not complete is held
        and completed again, until the load stops and nothing is held."""
        held: dict[str, int] = {}
        while not self.stop.is_set() or held:
            if not self.stop.is_set():
                answer = await worker.post(
                    "/v1/lease",
                    json={"queues": ["default"], "max": 20, "waitSeconds": 1, "leaseSeconds": 600},
                )
                if answer.status_code == 200:
                    for lease in answer.json()["leases"]:
                        held[lease["runId"]] = self.leased[lease["runId"]] = lease["fencingToken"]
                elif answer.status_code != 503:
                    self.wrong.append(("lease", answer.status_code, answer.text))
            if not held:
                continue
            items = [
                {"runId": run_id, "fencingToken": token, "outcome": "succeeded"}
                for run_id, token in held.items()
            ]
            answer = await worker.post("/v1/runs:complete", json={"items": items})
            if answer.status_code == 503:
                continue
            if answer.status_code != 200:
                self.wrong.append(("complete", answer.status_code, answer.text))
                return
            for result in answer.json()["items"]:
                run_id = result["runId"]
                if result.get("state") == "succeeded":
                    self.completed[run_id] = time.monotonic()
                    del held[run_id]
                elif result.get("problem", {}).get("status") == 503:
                    self.unavailable.append((int(run_id[1:].split("-")[0]), time.monotonic()))
                else:  # a lease lost (409 stale-lease), a run not found
                    self.wrong.append(("complete", result))
                    del held[run_id]


async def states_of(database: Database, shard: int, run_ids: list[str]) -> dict[str, str]:
    """Run id -> state, of those of ``run_ids`` that ``shard``'s database holds."""
    prefix = f"r{shard}-"
    ids = [int(run_id.removeprefix(prefix)) for run_id in run_ids if run_id.startswith(prefix)]
    async with database.connection(shard) as conn:
        rows = await conn.fetch("SELECT id, state FROM runs WHERE id = ANY($1::bigint[])", ids)
    return {f"{prefix}{row['id']}": row["state"] for row in rows}


async def test_a_shard_fails_over_to_its_synchronous_standby_under_load(
    pair: tuple[Primary, Standby],
    servers: tuple[PostgresProcess, PostgresProcess],
    kube: emulator.Emulator,
) -> None:
    primary, standby = pair
    admin = await asyncpg.connect(primary.url)
    try:
        await admin.execute("CREATE DATABASE tickwork_ha")
    finally:
        await admin.close()
    async with scratch_database(servers[1].url, "tickwork_other") as other_url:
        shard_map = ShardMap.from_dsns(
            [multi_host_url([primary, standby], "tickwork_ha"), other_url]
        )
        await installation.migrate(shard_map)  # `tickwork migrate`, through the same URLs
        names = {name_on(HA, 2): HA, name_on(OTHER, 2): OTHER}
        held_job, delayed_job = name_on(HA, 2, "held"), name_on(HA, 2, "delayed")
        load = Load(shard_of=names)
        async with (
            dispatcher(shard_map) as (url, services),
            clients_of(url) as clients,
            httpx.AsyncClient(base_url=url, timeout=10) as anyone,
            scheduler(shard_map) as probes,
            operator(shard_map, kube) as operator_jobs,
        ):
            # The load's jobs take queue default, the test's own steps queue billing.
            for name in [*names, delayed_job, held_job]:
                spec = {} if name in names else {"queue": "billing"}
                answer = await clients.team.put(f"/v1/jobs/{name}", json=spec)
                assert answer.status_code == 201, answer.text
            listener = services.engine.dispatcher.wakeups.test_signals
            started = time.monotonic()
            tasks = [
                *(asyncio.create_task(load.enqueue(clients.team, n)) for n in names for _ in "ab"),
                *(asyncio.create_task(load.work(clients.worker)) for _ in "ab"),
            ]
            try:
                await eventually(
                    lambda: load.count(load.completed, HA, started) >= 20,
                    what="runs of the shard completed before the crash",
                )
                # Leases the old primary grants just before it dies, held across.
                held = await clients.lease(
                    set(await clients.enqueue([held_job] * 5)), queue="billing"
                )
                await asyncio.to_thread(primary.stop, "immediate")
                crashed = time.monotonic()
                await eventually(lambda: load.refused(HA, crashed), what="the crash noticed")
                await listener.lost.wait_for(lambda shard: shard == HA)

                # Back as a standby: both servers answer, neither takes writes.
                await asyncio.to_thread(primary.restart_as_standby_of, standby)
                back = time.monotonic()
                await eventually(lambda: load.refused(HA, back), what="refused while none writes")
                # Meanwhile the shard on the other server is served as ever.
                await eventually(
                    lambda: (
                        load.count(load.enqueued, OTHER, crashed) >= 10
                        and load.count(load.completed, OTHER, crashed) >= 10
                    ),
                    what="the other shard served during the outage",
                )

                await asyncio.to_thread(standby.promote)
                promoted = time.monotonic()
                await eventually(
                    lambda: (
                        load.count(load.enqueued, HA, promoted) >= 10
                        and load.count(load.completed, HA, promoted) >= 10
                    ),
                    within=20,
                    what="runs of the shard enqueued, leased and completed after promotion",
                )
                # The leases granted just before the crash are the promoted server's.
                beats = await clients.heartbeat(held)
                assert all("leaseExpiresAt" in beat for beat in beats), beats
                assert await clients.complete(held) == dict.fromkeys(held, "succeeded")
                # The dispatcher listens again; the scheduler owns and schedules the
                # shard (a delayed run is made ready); the operator writes to it.
                await listener.listening.wait_for(lambda shard: shard == HA, within=15)
                await clients.run_through([delayed_job], "billing", delaySeconds=0.2)
                await eventually(
                    lambda: (probes.state()["owned"], probes.state()["down"]) == ([HA, OTHER], []),
                    what="the scheduler owning both shards, none down",
                )
                declared = name_on(HA, 2, "declared", tenant="default")
                await kube.create(scheduled_job(declared, schedule={"cron": "0 3 * * *"}))
                await kube.wait_for("sj", declared, observed(1), namespace="default")
                assert (await operator_jobs.get("default", declared)).definition is not None
                assert (await anyone.get("/readyz")).status_code == 200
            finally:
                load.stop.set()
                # The workers complete what they hold before they stop.
                await asyncio.wait_for(asyncio.gather(*tasks), 30)

        assert load.wrong == []
        print(
            f"{len(load.enqueued)} runs enqueued, {len(load.completed)} completed; "
            f"{promoted - crashed:.2f}s without a writable server"
        )
        # Every run whose enqueue was answered 201 is on the promoted standby (or the
        # other server); every lease granted was completed with its fencing token (a
        # lost one answers 409 stale-lease); every completion answered is recorded.
        assert load.completed.keys() == load.leased.keys()
        async with Database(shard_map) as now:
            for shard in (HA, OTHER):
                found = await states_of(now, shard, list(load.enqueued))
                mine = {r for r in load.enqueued if r.startswith(f"r{shard}-")}
                assert found.keys() == mine, f"shard {shard}: runs lost"
                assert {found[r] for r in mine & load.completed.keys()} == {"succeeded"}
