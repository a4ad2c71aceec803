"""The one wait of the tests on a condition that has no event to wait on: poll it at a
short interval up to a deadline. The deadline only catches a hang; a test never sleeps
through what it could observe.

Every test directory imports it as ``from polling import eventually`` (``tests`` is on
``sys.path``, as for ``conftest``)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

import pytest


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    within: float = 10.0,
    every: float = 0.02,
    what: str = "the condition",
) -> float:
    """Poll ``check`` (a function or a coroutine function) until it is true; return the
    seconds it took. Fails the test after ``within`` seconds."""
    started = time.monotonic()
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() - started > within:
            pytest.fail(f"{what} did not happen within {within}s")
        await asyncio.sleep(every)
