"""The threads that run plain-function handlers, so blocking code does not stall the
event loop (and with it the heartbeats).

Up to ``size`` threads (the worker's concurrency), started as needed and kept, take the
calls from one queue. A finished call's outcome goes back to the event loop in a batch:
the first call to finish since the loop last looked wakes it once, and the calls that
finish meanwhile ride along. ``loop.run_in_executor`` wakes the loop once per call and
chains two futures for it, which was most of a worker's time for short handlers.

A leased batch of runs is handed over as one unit (``run_batch``): the thread that takes
it runs its calls one after another, and hands it on to one more thread as it starts
(while calls are left), so that calls that block still run side by side, up to
``size`` at once. Short calls then cost one thread hand-off for many, not one each: a
thread woken per call was most of what a worker spent on a no-op handler.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

_Call: TypeAlias = tuple[Callable[[], Any], "asyncio.Future[Any]"]
Done: TypeAlias = Callable[[int, Any, "BaseException | None"], None]
"""Told on the loop's thread of each call of a batch that ended: its index in the
batch, what it returned, or what it raised."""


class Batch:
    """Calls run by the threads as one unit; ``done`` hears of each on the loop."""

    __slots__ = ("done", "left")

    def __init__(self, calls: Sequence[Callable[[], Any]], done: Done) -> None:
        self.left: collections.deque[tuple[int, Callable[[], Any]]] = collections.deque(
            enumerate(calls)
        )
        self.done = done

    def cancel(self) -> list[int]:
        """Take back the calls no thread has started (their indexes)."""
        taken: list[int] = []
        while True:
            try:
                taken.append(self.left.popleft()[0])
            except IndexError:
                return taken


# A call's outcome for the loop: the future to settle, or the batch and the call's index.
_Outcome: TypeAlias = tuple["asyncio.Future[Any] | Batch", int, Any, BaseException | None]


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
        self._calls: queue.SimpleQueue[_Call | Batch | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        # One permit per thread waiting for a call: a call takes one, or starts a thread.
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._starting = threading.Lock()  # a batch is handed on from the threads too
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
        self._hand((function, future))
        return future

    def run_batch(self, calls: Sequence[Callable[[], Any]], done: Done) -> Batch:
        """Call each of ``calls`` in the threads, telling ``done`` of each as it ends;
        call on the loop's thread."""
        if self._closed:
            raise RuntimeError("the handler threads are closed")
        batch = Batch(calls, done)
        if calls:
            self._hand(batch)
        return batch

    def _hand(self, item: _Call | Batch) -> None:
        """Queue ``item`` for an idle thread, or for a new one while there are fewer
        than ``size``."""
        self._calls.put(item)
        if not self._idle.acquire(blocking=False):
            with self._starting:
                if len(self._threads) >= self._size:
                    return
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=False
                )
                self._threads.append(thread)
            thread.start()

    def close(self) -> None:
        """Cancel the calls not started yet and let every thread end once its current
        call returns (without waiting for it); call on the loop's thread."""
        self._closed = True
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if isinstance(call, Batch):
                call.cancel()
            elif call is not None:
                call[1].cancel()
        for _ in self._threads:
            self._calls.put(None)

    def _work(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            if isinstance(call, Batch):
                self._run(call)
            else:
                function, future = call
                try:
                    outcome: _Outcome = (future, 0, function(), None)
                except BaseException as error:  # handed to the awaiting task, as an executor does
                    outcome = (future, 0, None, error)
                self._finish(outcome)
                del function, future, outcome
            del call
            self._idle.release()

    def _run(self, batch: Batch) -> None:
        """Run ``batch``'s calls until none is left, handing it on to one more thread
        once, as soon as this thread has a call of its own and calls are left."""
        handed = False
        while True:
            try:
                index, function = batch.left.popleft()
            except IndexError:
                return
            if not handed and batch.left and not self._closed:
                handed = True
                self._hand(batch)
            try:
                outcome: _Outcome = (batch, index, function(), None)
            except BaseException as error:  # told to the loop, as a single call's is
                outcome = (batch, index, None, error)
            self._finish(outcome)
            del function, outcome

    def _finish(self, outcome: _Outcome) -> None:
        with self._lock:
            self._finished.append(outcome)
            first = len(self._finished) == 1
        if first:
            # The loop is gone when the worker stopped without waiting for us.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
        for target, index, result, error in finished:
            if isinstance(target, Batch):
                target.done(index, result, error)
            elif target.done():  # the awaiting task was cancelled
                continue
            elif error is None:
                target.set_result(result)
            elif isinstance(error, StopIteration):
                # A future refuses StopIteration (it would end the awaiting coroutine).
                target.set_exception(RuntimeError(f"the handler raised {error!r}"))
            else:
                target.set_exception(error)
