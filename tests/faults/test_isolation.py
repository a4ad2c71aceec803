"""Failure isolation: with one shard's database hanging, the scheduler keeps passing
over every other shard on its own loop, and ``/readyz`` names the hung shard; once it answers again
the shard is owned and scheduled again. Workers are served from the other shards
meanwhile.

The scheduler's side runs on both coordination backends: through PostgreSQL (the hung
shard's lease cannot be read, so nobody owns it) and through Kubernetes Leases (the
lease stays held; the shard's passes fail)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import httpx
import pytest
from api.clients import HandClock
from conftest import WORKER_TOKEN
from kube import emulator
from polling import eventually

from faults.conftest import SHARDS, Api, failures, proxied_map, scheduling, serving
from faults.proxy import TcpProxy
from tickwork.cli.probes import Probes
from tickwork.coordination import choice
from tickwork.core.records import State
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.shard_health import ShardHealth
from tickwork.store.database import Database, PoolSettings

HUNG = 1
# A hung statement is given up after 3 s: far longer than a healthy shard's pass, so a
# loop shared between shards would show as few passes over the healthy shards.
SLOW_POOLS = PoolSettings(command_timeout=3, acquire_timeout=3, connect_timeout=3)


async def a_job_per_shard(jobs: Jobs, runs: int = 0) -> dict[int, str]:
    """A job of acme's on every shard, with ``runs`` ready runs each: the names by shard."""
    names = {jobs.shard_of("acme", f"job-{n}"): f"job-{n}" for n in range(40)}
    assert len(names) == SHARDS
    for name in names.values():
        await jobs.put("acme", name, JobSpec(), "test")
        for _ in range(runs):
            await jobs.enqueue("acme", name, EnqueueRequest(), "test")
    return names


def worker_of(api: Api) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {WORKER_TOKEN}"}
    return httpx.AsyncClient(base_url=api.url, headers=headers, timeout=10)


async def ready(probes: Probes) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=2) as client:
        answer = await client.get(f"{probes.url}/readyz")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.mark.parametrize("kind", ["postgres", "kubernetes"])
async def test_a_hung_shard_is_named_by_readyz_and_the_others_keep_being_scheduled(
    kind: choice.Kind,
    fault_url: str,
    proxies: list[TcpProxy],
    kube: emulator.Emulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if kind == "kubernetes":
        await kube.create_namespace(choice.DEFAULT_NAMESPACE)
        monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    async with (
        Database(proxied_map(fault_url, proxies), SLOW_POOLS) as database,
        Database(ShardMap.from_dsns([fault_url], SHARDS)) as direct,
    ):
        jobs = Jobs(direct)  # the test's own links, around the proxies
        names = await a_job_per_shard(jobs)
        async with scheduling(database, kind) as (scheduler, probes):
            await eventually(
                lambda: probes.coordinator.owned().keys() == set(range(SHARDS)),
                what="every shard owned",
            )
            passes = scheduler.test_signals.passed
            passes.init()
            failed_before = failures(scheduler)
            proxies[HUNG].hang()
            await eventually(
                lambda: probes.state()["down"] == [HUNG], within=8, what="/readyz naming it"
            )
            assert (await ready(probes))["down"] == [HUNG]
            # Meanwhile every other shard is scheduled.
            healthy = [s for s in range(SHARDS) if s != HUNG]
            for _ in range(3):
                made = [
                    (await jobs.enqueue("acme", names[s], EnqueueRequest(delay_seconds=0.2), "t"))[
                        0
                    ]
                    for s in healthy
                ]
                for run in made:

                    async def flipped(run_id: str = run.run_id) -> bool:
                        return (await jobs.run(run_id))[0].state is State.ready

                    await eventually(flipped, what="a healthy shard's run ready")
            assert (await ready(probes))["down"] == [HUNG]
            # Each at its own pace: one loop for every shard would pass over the healthy
            # ones at most three times per hung statement (once alongside it, twice at
            # the 0.1 s interval while its retry waits); loops of their own pass every
            # 0.1 s, tens of times in a hung statement's 3 s.
            # The statements given up on, and the one hanging now.
            hung_statements = failures(scheduler) - failed_before + 1
            counted = Counter(report.shard for batch in passes.drain() for report in batch)
            assert HUNG not in counted, counted
            assert min(counted[s] for s in healthy) > 3 * hung_statements, (
                counted,
                hung_statements,
            )

            proxies[HUNG].heal()
            await eventually(
                lambda: probes.state()["down"] == [] and HUNG in probes.coordinator.owned(),
                within=10,
                what="the shard owned and scheduled again",
            )
            run, _ = await jobs.enqueue("acme", names[HUNG], EnqueueRequest(delay_seconds=0.1), "t")

            async def recovered() -> bool:
                return (await jobs.run(run.run_id))[0].state is State.ready

            await eventually(recovered, within=5, what="the healed shard scheduled")


async def test_workers_are_served_from_the_other_shards_while_one_hangs(
    fault_url: str, proxies: list[TcpProxy], caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        serving(proxied_map(fault_url, proxies), SLOW_POOLS) as api,
        Database(ShardMap.from_dsns([fault_url], SHARDS)) as direct,
        worker_of(api) as worker,
    ):
        await a_job_per_shard(Jobs(direct), runs=30)
        # The backoff of a shard whose claim failed, on a clock of the test's: the hung
        # shard, once it failed, is left out until the test moves the clock on.
        clock = HandClock()
        api.services.dispatcher.health = ShardHealth(monotonic=clock)
        caplog.set_level(logging.WARNING, logger="tickwork.engine.dispatch")
        proxies[HUNG].hang()
        leased = []
        for _ in range(30):  # each call starts at the next shard: every 4th at the hung one
            answer = await worker.post("/v1/lease", json={"queues": ["default"], "max": 2})
            assert answer.status_code == 200, answer.text
            leased += [item["runId"] for item in answer.json()["leases"]]
        # Every call served from the healthy shards, and only one waited on the hung one
        # (for the bound of a claim): the others left it out. How long the calls took is
        # measured by make bench.
        assert len(leased) == 60 and not [r for r in leased if r.startswith(f"r{HUNG}-")]
        tried = [
            r.getMessage()
            for r in caplog.records
            if getattr(r, "action", None) == "claim-skipped" and getattr(r, "shard", None) == HUNG
        ]
        assert len(tried) == 1, tried
        async with httpx.AsyncClient(base_url=api.url, timeout=5) as anyone:
            readiness = (await anyone.get("/readyz")).json()
        assert readiness["down"] == [HUNG]
        proxies[HUNG].heal()
        clock.advance(3600)  # the backoff over: the next call tries the shard again

        async def served_again() -> bool:
            answer = await worker.post("/v1/lease", json={"queues": ["default"], "max": 100})
            return any(i["runId"].startswith(f"r{HUNG}-") for i in answer.json()["leases"])

        await eventually(served_again, within=10, every=0.2, what="the healed shard served")


async def test_a_batch_across_shards_goes_through_on_the_shards_that_answer(
    fault_url: str, proxies: list[TcpProxy]
) -> None:
    """One shard down fails only its own items of a heartbeat or completion batch; a
    batch wholly on the down shard is a 503, as for any call that found no store."""
    async with (
        serving(proxied_map(fault_url, proxies)) as api,
        Database(ShardMap.from_dsns([fault_url], SHARDS)) as direct,
        worker_of(api) as worker,
    ):
        jobs = Jobs(direct)
        await a_job_per_shard(jobs, runs=1)
        answer = await worker.post("/v1/lease", json={"queues": ["default"], "max": 10})
        leases = answer.json()["leases"]
        assert len(leases) == SHARDS
        down = next(lease for lease in leases if lease["runId"].startswith(f"r{HUNG}-"))
        proxies[HUNG].starting_up()
        proxies[HUNG].reset()

        def item(lease: dict[str, Any]) -> dict[str, Any]:
            return {"runId": lease["runId"], "fencingToken": lease["fencingToken"]}

        beats = [item(lease) | {"extendSeconds": 30} for lease in leases]
        answer = await worker.post("/v1/runs:heartbeat", json={"items": beats})
        assert answer.status_code == 200, answer.text
        for lease, result in zip(leases, answer.json()["items"], strict=True):
            if lease is down:
                assert result["problem"]["type"].endswith("/store-unavailable")
                assert result["problem"]["status"] == 503
            else:
                assert "leaseExpiresAt" in result, result
        done = [item(lease) | {"outcome": "succeeded"} for lease in leases]
        answer = await worker.post("/v1/runs:complete", json={"items": done})
        assert answer.status_code == 200, answer.text
        states = [r.get("state") or r["problem"]["type"] for r in answer.json()["items"]]
        assert states == [
            "https://tickwork.dev/problems/store-unavailable" if lease is down else "succeeded"
            for lease in leases
        ]
        only_down = {"items": [item(down) | {"outcome": "succeeded"}]}
        answer = await worker.post("/v1/runs:complete", json=only_down)
        assert answer.status_code == 503, answer.text
        proxies[HUNG].heal()

        async def completed_again() -> bool:
            answer = await worker.post("/v1/runs:complete", json=only_down)
            return answer.status_code == 200 and answer.json()["items"][0].get("state") == (
                "succeeded"
            )

        await eventually(completed_again, within=10, every=0.2, what="the healed shard's item")
        for lease in leases:
            run, _ = await jobs.run(lease["runId"])
            assert run.state is State.succeeded
