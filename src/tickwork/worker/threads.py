"""The threads that run plain-function handlers, so blocking code does not stall the
event loop (and with it the heartbeats).

Up to ``size`` threads (the worker's concurrency), started as needed and kept, take the
calls from one queue. A finished call's outcome goes back to the event loop in a batch:
the first call to finish since the loop last looked wakes it once, and the calls that
finish meanwhile ride along. ``loop.run_in_executor`` wakes the loop once per call and
chains two futures for it, which was most of a worker's time for short handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeAlias

_Call: TypeAlias = tuple[Callable[[], Any], "asyncio.Future[Any]"]
_Outcome: TypeAlias = tuple["asyncio.Future[Any]", Any, BaseException | None]


class HandlerThreads:
    """Run functions in threads; each call's outcome is a future of ``loop``."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, size: int, name: str = "tickwork-handler"
    ) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._loop = loop
        self._size = size
        self._name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        # One permit per thread waiting for a call: a call takes one, or starts a thread.
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._finished: list[_Outcome] = []
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads started so far (at most ``size``)."""
        return len(self._threads)

    @property
    def undelivered(self) -> int:
        """Calls finished whose outcome the loop has not taken yet."""
        with self._lock:
            return len(self._finished)

    def run(self, function: Callable[[], Any]) -> asyncio.Future[Any]:
        """Call ``function()`` in a thread; call on the loop's thread."""
        if self._closed:
            raise RuntimeError("the handler threads are closed")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._calls.put((function, future))
        if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
            thread = threading.Thread(
                target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=False
            )
            self._threads.append(thread)
            thread.start()
        return future

    def close(self) -> None:
        """Cancel the calls not started yet and let every thread end once its current
        call returns (without waiting for it); call on the loop's thread."""
        self._closed = True
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if call is not None:
                call[1].cancel()
        for _ in self._threads:
            self._calls.put(None)

    def _work(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            function, future = call
            try:
                outcome: _Outcome = (future, function(), None)
            except BaseException as error:  # handed to the awaiting task, as an executor does
                outcome = (future, None, error)
            with self._lock:
                self._finished.append(outcome)
                first = len(self._finished) == 1
            if first:
                # The loop is gone when the worker stopped without waiting for us.
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._deliver)
            del call, function, future, outcome
            self._idle.release()

    def _deliver(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
        for future, result, error in finished:
            if future.done():  # the awaiting task was cancelled
                continue
            if error is None:
                future.set_result(result)
            elif isinstance(error, StopIteration):
                # A future refuses StopIteration (it would end the awaiting coroutine).
                future.set_exception(RuntimeError(f"the handler raised {error!r}"))
            else:
                future.set_exception(error)
