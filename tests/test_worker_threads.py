"""The threads that run plain-function handlers (``tickwork.worker.threads``): bounded
by the worker's concurrency, outcomes handed back to the event loop in batches."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from tickwork.worker.threads import HandlerThreads

pytestmark = pytest.mark.timeout(30)

WAIT = 10.0


async def test_calls_run_side_by_side_up_to_the_size_and_no_further() -> None:
    loop = asyncio.get_running_loop()
    threads = HandlerThreads(loop, 3)
    together = threading.Barrier(3, timeout=WAIT)
    running = 0
    most = 0
    lock = threading.Lock()

    def call(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        if n < 3:
            together.wait()  # the first three must run at once, or this times out
        with lock:
            running -= 1
        return n * 10

    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(threads.run(lambda n=n: call(n)) for n in range(8))), WAIT
        )
    finally:
        threads.close()
    assert results == [n * 10 for n in range(8)]
    assert most == 3
    assert threads.threads == 3


async def test_an_exception_reaches_the_awaiting_task() -> None:
    threads = HandlerThreads(asyncio.get_running_loop(), 2)

    def fail() -> None:
        raise KeyError("gone")

    try:
        with pytest.raises(KeyError, match="gone"):
            await asyncio.wait_for(threads.run(fail), WAIT)
        assert await asyncio.wait_for(threads.run(lambda: "still working"), WAIT) == (
            "still working"
        )
    finally:
        threads.close()


async def test_calls_finishing_together_wake_the_loop_once() -> None:
    loop = asyncio.get_running_loop()
    threads = HandlerThreads(loop, 10)
    wakeups = 0
    real = loop.call_soon_threadsafe

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal wakeups
        wakeups += 1
        return real(*args, **kwargs)

    def call(n: int) -> int:
        return n

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        futures = [threads.run(lambda n=n: call(n)) for n in range(50)]
        # Hold the loop (a blocking wait on purpose) until every call has returned:
        # their outcomes must all go back with a single wake-up.
        deadline = time.monotonic() + WAIT
        while threads.undelivered < 50:
            assert time.monotonic() < deadline
            time.sleep(0.001)  # noqa: ASYNC251 - holding the loop is the point
        results = await asyncio.wait_for(asyncio.gather(*futures), WAIT)
    finally:
        del loop.call_soon_threadsafe
        threads.close()
    assert results == list(range(50))
    assert wakeups == 1


async def test_close_cancels_the_calls_not_started() -> None:
    threads = HandlerThreads(asyncio.get_running_loop(), 1)
    release = threading.Event()
    started = threading.Event()

    def block() -> str:
        started.set()
        release.wait(WAIT)
        return "done"

    first = threads.run(block)
    second = threads.run(lambda: "never")
    assert await asyncio.to_thread(started.wait, WAIT)
    threads.close()
    release.set()
    assert second.cancelled()
    assert await asyncio.wait_for(first, WAIT) == "done"
    with pytest.raises(RuntimeError):
        threads.run(lambda: None)
