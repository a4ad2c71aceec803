"""Calls bounded in time without being cancelled.

A coordination call on a hung link (a shard's database, the Kubernetes API) must not
hold up the loop, but cancelling a database call mid-flight leaves its connection in
an unknown state. A late call is therefore abandoned, not cancelled: it ends on its
own (the pool's statement timeout, the client's request timeout) while the loop goes
on, and its answer is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class Late(TimeoutError):
    """A call did not answer within its bound."""


class Bounded:
    """Runs calls with a time bound, keeping the abandoned ones until they end."""

    def __init__(self) -> None:
        self._late: set[asyncio.Future[Any]] = set()

    async def within(self, seconds: float, call: Awaitable[T]) -> T:
        task = asyncio.ensure_future(call)
        done, _ = await asyncio.wait({task}, timeout=seconds)
        if task in done:
            return task.result()
        self._late.add(task)
        task.add_done_callback(self._forget)
        raise Late(f"no answer within {seconds:g}s")

    def _forget(self, task: asyncio.Future[Any]) -> None:
        self._late.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an abandoned call's failure is not news

    @property
    def pending(self) -> int:
        return len(self._late)

    async def settle(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the abandoned calls, then cancel what is left."""
        if not self._late:
            return
        _, left = await asyncio.wait(set(self._late), timeout=seconds)
        for task in left:
            task.cancel()
        for task in left:
            with contextlib.suppress(BaseException):
                await task
