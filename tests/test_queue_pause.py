"""Pausing a queue: enqueues go on, no claim leases its runs (on any path of the claim,
on any shard) until it is resumed; per tenant; exact once the pause call returned."""

from __future__ import annotations

import asyncio
from datetime import datetime

from tickwork.core.clock import FrozenClock
from tickwork.core.records import Lease
from tickwork.core.spec import JobSpec, Priority
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.queues import Queues
from tickwork.store.database import Database

ACME, GLOBEX = "acme", "globex"


async def make(jobs: Jobs, tenant: str, name: str, queue: str, **fields: object) -> None:
    await jobs.put(tenant, name, JobSpec.model_validate({"queue": queue, **fields}), "test")


async def enqueue(jobs: Jobs, tenant: str, name: str, count: int = 1) -> None:
    for _ in range(count):
        await jobs.enqueue(tenant, name, EnqueueRequest(), "test")


async def lease(dispatcher: Dispatcher, queues: list[str], limit: int = 100) -> list[Lease]:
    return await dispatcher.lease(queues, limit=limit, worker_id="w", lease_seconds=30)


async def test_a_paused_queue_takes_enqueues_and_hands_out_nothing_until_resumed(
    database: Database, clock: FrozenClock
) -> None:
    jobs, queues = Jobs(database, clock), Queues(database, clock)
    dispatcher = Dispatcher(database, clock)
    # Jobs on several shards, one of them limited (the claim's flow path), another of
    # another priority (the merging path), in the paused queue and in another one.
    for index in range(6):
        await make(jobs, ACME, f"report-{index}", "reports")
    await make(jobs, ACME, "limited", "reports", concurrency=2)
    await make(jobs, ACME, "urgent", "reports", priority=Priority.critical.value)
    await make(jobs, ACME, "mail", "mail")
    paused = await queues.pause(ACME, "reports", "alice")
    assert (paused.queue, paused.paused, paused.paused_by, paused.jobs) == (
        "reports",
        True,
        "alice",
        8,
    )
    for index in range(6):
        await enqueue(jobs, ACME, f"report-{index}", 3)
    await enqueue(jobs, ACME, "limited", 3)
    await enqueue(jobs, ACME, "urgent", 2)
    await enqueue(jobs, ACME, "mail", 2)

    # One queue alone (the one-head path), both queues (merging), and again.
    assert await lease(dispatcher, ["reports"]) == []
    both = await lease(dispatcher, ["reports", "mail"])
    assert sorted(lease.job for lease in both) == ["mail", "mail"]
    assert await lease(dispatcher, ["reports", "mail"]) == []

    # Pausing again changes nothing (the first pause's actor stays).
    again = await queues.pause(ACME, "reports", "bob")
    assert again.paused_by == "alice"
    [listed] = [q for q in await queues.list(ACME) if q.queue == "reports"]
    assert listed.paused and listed.paused_by == "alice"

    resumed = await queues.resume(ACME, "reports", "carol")
    assert not resumed.paused
    got = await lease(dispatcher, ["reports"])
    # The limited job's two slots, and every other run.
    assert len(got) == 6 * 3 + 2 + 2
    assert sum(lease.job == "limited" for lease in got) == 2


async def test_a_pause_is_the_tenants_own(database: Database, clock: FrozenClock) -> None:
    jobs, queues = Jobs(database, clock), Queues(database, clock)
    dispatcher = Dispatcher(database, clock)
    await make(jobs, ACME, "export", "reports")
    await make(jobs, GLOBEX, "export", "reports")
    await enqueue(jobs, ACME, "export")
    await enqueue(jobs, GLOBEX, "export")
    await queues.pause(ACME, "reports", "alice")
    [got] = await lease(dispatcher, ["reports"])
    assert got.tenant == GLOBEX
    assert [q.queue for q in await queues.list(GLOBEX) if q.paused] == []


async def test_once_the_pause_returned_no_claim_that_starts_leases_from_the_queue(
    database: Database,
) -> None:
    """Four claimers on two dispatchers (two pools) lease while the queue is paused: a
    claim that began before the pause committed may still finish with a run; none that
    began after it does."""
    clock = FrozenClock(datetime.now().astimezone())
    jobs, queues = Jobs(database, clock), Queues(database, clock)
    for index in range(8):
        await make(jobs, ACME, f"export-{index}", "reports")
        await enqueue(jobs, ACME, f"export-{index}", 40)
    other = Database(database.shard_map)
    async with other:
        dispatchers = [Dispatcher(database), Dispatcher(other)]
        leased: list[tuple[float, float, Lease]] = []  # (claim began, claim ended, lease)
        stop = asyncio.Event()
        enough = asyncio.Event()  # 20 leases made before the pause
        loop = asyncio.get_running_loop()

        async def claimer(dispatcher: Dispatcher) -> None:
            while not stop.is_set():
                began = loop.time()
                got = await dispatcher.lease(["reports"], limit=2, worker_id="w", lease_seconds=60)
                ended = loop.time()
                leased.extend((began, ended, lease) for lease in got)
                if len(leased) >= 20:
                    enough.set()
                await asyncio.sleep(0)

        claimers = [asyncio.create_task(claimer(d)) for d in dispatchers for _ in range(2)]
        await asyncio.wait_for(enough.wait(), 30)
        await queues.pause(ACME, "reports", "alice")
        paused_at = loop.time()
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*claimers)
    late = [lease for began, _, lease in leased if began > paused_at]
    assert late == []
    assert 20 <= len(leased) < 8 * 40
