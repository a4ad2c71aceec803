"""A leased batch of runs with plain-function handlers goes to the handler threads as
one unit (``HandlerThreads.run_batch``): still side by side where handlers block, each
run with its own context variables, a plain function's awaitable still awaited, and
the unfinished ones failed for a retry at the drain's timeout."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest
from test_worker import WAIT, Results, enqueue, make_worker, put_job, running

from tickwork.worker import RunContext
from tickwork.worker.threads import HandlerThreads

pytestmark = pytest.mark.timeout(30)


async def test_a_batch_runs_blocking_calls_side_by_side_up_to_the_size() -> None:
    loop = asyncio.get_running_loop()
    threads = HandlerThreads(loop, 3)
    together = threading.Barrier(3, timeout=WAIT)
    told: dict[int, Any] = {}
    all_told = asyncio.Event()

    def call(n: int) -> int:
        if n < 3:
            together.wait()  # the first three must run at once, or this times out
        if n == 5:
            raise KeyError("five")
        return n * 10

    def done(index: int, result: Any, error: BaseException | None) -> None:
        told[index] = error if error is not None else result
        if len(told) == 8:
            all_told.set()

    try:
        threads.run_batch([lambda n=n: call(n) for n in range(8)], done)
        await asyncio.wait_for(all_told.wait(), WAIT)
    finally:
        threads.close()
    assert {n: v for n, v in told.items() if n != 5} == {n: n * 10 for n in range(8) if n != 5}
    assert isinstance(told[5], KeyError)
    assert threads.threads == 3


async def test_a_batch_of_short_calls_is_not_a_thread_each() -> None:
    loop = asyncio.get_running_loop()
    threads = HandlerThreads(loop, 100)
    told: list[int] = []
    all_told = asyncio.Event()

    def done(index: int, _result: Any, _error: BaseException | None) -> None:
        told.append(index)
        if len(told) == 100:
            all_told.set()

    try:
        threads.run_batch([lambda: None] * 100, done)
        await asyncio.wait_for(all_told.wait(), WAIT)
    finally:
        threads.close()
    assert sorted(told) == list(range(100))
    # Handed from thread to thread only while calls are left: a call each would have
    # started 100 threads.
    assert threads.threads <= 50


async def test_cancelling_a_batch_takes_back_the_calls_not_started() -> None:
    threads = HandlerThreads(asyncio.get_running_loop(), 1)
    release = threading.Event()
    started = threading.Event()
    ran: list[int] = []

    def block() -> None:
        started.set()
        release.wait(WAIT)

    batch = threads.run_batch(
        [block, lambda: ran.append(1), lambda: ran.append(2)], lambda *_: None
    )
    assert await asyncio.to_thread(started.wait, WAIT)
    assert batch.cancel() == [1, 2]
    release.set()
    threads.close()
    assert ran == []


async def test_plain_handlers_of_one_lease_run_side_by_side(api_server: Any) -> None:
    await put_job(api_server, "wide")
    run_ids = [await enqueue(api_server, "wide", {"n": n}) for n in range(4)]
    results = Results()
    worker = make_worker(api_server, results, concurrency=4)
    together = threading.Barrier(4, timeout=WAIT)
    variable: contextvars.ContextVar[str] = contextvars.ContextVar("run", default="unset")
    seen: list[str] = []

    @worker.handler(job="wide")
    def wide(ctx: RunContext) -> None:
        seen.append(variable.get())  # each run starts with the lease loop's variables
        variable.set(ctx.run_id)
        together.wait()  # all four at once, or this times out and the runs fail

    async with running(worker):
        found = await results.wait(4)
    assert sorted(r.run_id for r in found) == sorted(run_ids)
    assert {(r.outcome, r.state) for r in found} == {("succeeded", "succeeded")}
    assert seen == ["unset"] * 4


async def test_a_plain_handler_that_returns_an_awaitable_is_awaited(api_server: Any) -> None:
    await put_job(api_server, "returns")
    run_id = await enqueue(api_server, "returns")
    results = Results()
    worker = make_worker(api_server, results)
    awaited = asyncio.Event()

    async def later() -> None:
        awaited.set()
        raise ValueError("from the awaitable")

    @worker.handler(job="returns")
    def returns(_ctx: RunContext) -> Any:
        return later()

    async with running(worker):
        [result] = await results.wait(1)
    assert awaited.is_set()
    assert (result.run_id, result.outcome, result.state) == (run_id, "failed", "retry_wait")
    assert result.message == "ValueError: from the awaitable"


async def test_the_drain_timeout_fails_every_unfinished_plain_run(api_server: Any) -> None:
    await put_job(api_server, "stuck", retry={"maxAttempts": 3, "baseSeconds": 60})
    run_ids = [await enqueue(api_server, "stuck") for _ in range(3)]
    results = Results()
    worker = make_worker(api_server, results, concurrency=3, drain_timeout=0.1)
    release = threading.Event()
    started = threading.Semaphore(0)

    @worker.handler(job="stuck")
    def stuck(_ctx: RunContext) -> None:
        started.release()
        release.wait(WAIT)

    task = asyncio.create_task(worker.run())
    try:
        for _ in range(3):
            assert await asyncio.to_thread(started.acquire, True, WAIT)
        assert worker.in_flight == 3
        worker.stop()
        async with asyncio.timeout(WAIT):
            await task
    finally:
        release.set()
    assert sorted(r.run_id for r in results.items) == sorted(run_ids)
    assert {(r.outcome, r.retryable, r.state, r.message) for r in results.items} == {
        ("failed", True, "retry_wait", "worker stopped before the handler finished")
    }
