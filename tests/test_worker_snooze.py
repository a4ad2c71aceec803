"""``Snooze`` in the worker SDK: a handler raises or returns it, the worker completes
the run as ``snoozed`` and it comes back with the same attempt; ``run_handler`` reports
it without a server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_worker import Results, enqueue, make_worker, put_job, running, scheduler_loop, state_of

from tickwork.core.records import State
from tickwork.testing import Snooze, run_handler
from tickwork.worker import RunContext, RunResult
from tickwork.worker import Snooze as WorkerSnooze


async def test_a_handler_that_snoozes_runs_again_with_the_same_attempt(api_server: Any) -> None:
    await put_job(api_server, "waits-for-file", retry={"maxAttempts": 1})
    run_id = await enqueue(api_server, "waits-for-file")
    results = Results()

    def on_result(result: RunResult) -> None:
        results(result)
        api_server.scheduler.wake()  # promote the snoozed run now

    worker = make_worker(api_server, on_result)  # type: ignore[arg-type]
    seen: list[tuple[int, int]] = []

    @worker.handler(job="waits-for-file")
    async def waits(ctx: RunContext) -> Snooze | None:
        seen.append((ctx.attempt, ctx.fencing_token))
        if len(seen) == 1:
            raise Snooze(0)
        if len(seen) == 2:
            return Snooze(0)  # returning it does the same
        return None

    async with scheduler_loop(api_server), running(worker):
        found = await results.wait(3)

    assert [(r.outcome, r.state) for r in found] == [
        ("snoozed", "retry_wait"),
        ("snoozed", "retry_wait"),
        ("succeeded", "succeeded"),
    ]
    # maxAttempts 1: two snoozes used none of it.
    assert [attempt for attempt, _ in seen] == [1, 1, 1]
    assert len({token for _, token in seen}) == 3
    run, attempts = await state_of(api_server, run_id)
    assert run.state is State.succeeded
    assert [a.outcome for a in attempts] == ["snoozed", "snoozed", "succeeded"]


def test_run_handler_reports_a_snooze() -> None:
    def raising(ctx: RunContext) -> None:
        raise WorkerSnooze(30)

    async def returning(ctx: RunContext) -> Snooze:
        return Snooze(2.5)

    result = run_handler(raising)
    assert result.snoozed and not result.failed and result.delay_seconds == 30
    assert run_handler(returning).delay_seconds == 2.5


def test_a_snooze_is_bounded() -> None:
    with pytest.raises(ValueError, match="seconds"):
        Snooze(-1)
    with pytest.raises(ValueError, match="seconds"):
        Snooze(8 * 86_400)


async def test_a_snooze_in_flight_is_not_lost_to_a_quick_stop(api_server: Any) -> None:
    """The snooze is delivered like any outcome when the worker drains."""
    await put_job(api_server, "slow-snooze")
    run_id = await enqueue(api_server, "slow-snooze")
    results = Results()
    worker = make_worker(api_server, results)
    started, release = asyncio.Event(), asyncio.Event()

    @worker.handler(job="slow-snooze")
    async def slow(ctx: RunContext) -> None:
        started.set()
        await release.wait()
        raise Snooze(60)

    async with running(worker):
        await started.wait()
        worker.stop()
        release.set()
        [result] = await results.wait(1)
    assert (result.outcome, result.state) == ("snoozed", "retry_wait")
    run, _ = await state_of(api_server, run_id)
    assert run.state is State.retry_wait and run.attempt == 0
