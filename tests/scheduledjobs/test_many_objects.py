"""Many ScheduledJobs (500): every one becomes Ready (the throughput is logged), and the
status pass's writes follow the jobs that changed (none in a quiet interval, about ten
for activity on ten jobs), counted at the API server."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from kube import emulator

from tickwork.core.clock import FrozenClock
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs

from .conftest import NAMESPACES, OperatorFactory, ready, scheduled_job

pytestmark = pytest.mark.timeout(300)

# 500 objects, about 125 a shard, fifty times the active ones: enough that a pass
# writing every object instead of the changed ones, or a handler missing objects in a
# crowd, shows in the counts. It was 2 000: over a minute of the suite's time for the
# same counts (no assertion is on how long it takes).
OBJECTS = 500
ACTIVE = 10

logger = logging.getLogger(__name__)


def count_ready(kube: emulator.Emulator) -> int:
    return sum(
        1
        for namespace in NAMESPACES
        for obj in kube.objects("sj", namespace)
        if ready(obj) and obj["status"].get("observedGeneration") == 1
    )


async def test_many_objects_become_ready_and_status_writes_follow_changed_jobs(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    jobs: Jobs,
    clock: FrozenClock,
) -> None:
    loop = asyncio.get_running_loop()
    names = [(NAMESPACES[i % 2], f"job-{i:04d}") for i in range(OBJECTS)]
    # No webhook: in a cluster the API server, not the operator, makes those calls.
    async with operator_for(webhook=None) as operator:
        started, cpu = loop.time(), time.process_time()
        for namespace, name in names:
            await cluster_kube.create(
                scheduled_job(name, namespace, schedule={"cron": f"{int(name[-2:]) % 60} * * * *"})
            )
        # Each handler says when it is done (counting Ready objects as they come would
        # cost more CPU than the operator); the last status patches follow.
        reconciled = operator.test_signals.reconciled
        done = {await reconciled.wait(within=120) for _ in range(OBJECTS)}
        assert len(done) == OBJECTS
        await cluster_kube.wait_until(lambda: count_ready(cluster_kube) == OBJECTS, timeout=30)
        elapsed, spent = loop.time() - started, time.process_time() - cpu
        # The emulated API server runs in this process too: the CPU per object is the
        # operator's and the API server's together.
        logger.warning(
            "reconcile throughput: %d objects applied -> Ready in %.1f s (%.0f objects/s; "
            "%.1f ms of CPU per object, operator and emulated API server together)",
            OBJECTS,
            elapsed,
            OBJECTS / elapsed,
            1000 * spent / OBJECTS,
        )

        # Whatever the handlers marked (every definition stored), taken in one pass.
        await operator.status_pass.pass_once()
        writes = cluster_kube.count("patch", "scheduledjobs/status")

        # A quiet interval: no run changed, nothing is written.
        report = await operator.status_pass.pass_once()
        assert (report.changed, report.patched) == (0, 0)
        assert cluster_kube.count("patch", "scheduledjobs/status") == writes

        # Activity on ten jobs: a run each, leased; about ten status patches.
        active = names[:ACTIVE]
        for namespace, name in active:
            await jobs.enqueue(namespace, name, EnqueueRequest(), "test")
        leased = await Dispatcher(jobs.database).lease(
            ["default"], limit=ACTIVE, worker_id="worker-1", lease_seconds=30
        )
        assert len(leased) == ACTIVE
        report = await operator.status_pass.pass_once()
        assert report.changed == ACTIVE
        patches = cluster_kube.count("patch", "scheduledjobs/status") - writes
        assert ACTIVE <= patches <= ACTIVE + 2
        for namespace, name in active:
            status = cluster_kube.get("sj", name, namespace)["status"]  # type: ignore[index]
            assert (status["activeRuns"], status["lastRunState"]) == (1, "leased")
