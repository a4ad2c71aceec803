"""Test signals: typed events a background loop emits and a test waits on.

A loop calls ``signal.signal(value)`` at a point a test may want to observe (a
listening connection is up, a heartbeat was answered). Until a test calls ``init()``,
that costs one attribute check and keeps nothing; once initialised, values queue up
in order and ``await signal.wait()`` takes the next one, failing the test after a
timeout instead of hanging it. River's ``rivershared/testsignal`` is the model.

Components group their signals in a small dataclass (``Signals``) with an ``init()``
that enables them all, reachable as ``component.test_signals``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Callable
from typing import ClassVar, Final, Generic, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT: Final = 10.0


class SignalTimeout(AssertionError):
    """A test waited on a signal that did not come in time."""


class TestSignal(Generic[T]):
    """One kind of event, in the order emitted. Nothing is kept until ``init()``."""

    __test__: ClassVar[bool] = False  # a test helper, not a test class
    __slots__ = ("_changed", "_values", "name")

    def __init__(self, name: str = "signal") -> None:
        self.name = name
        self._values: deque[T] | None = None
        self._changed: asyncio.Event | None = None

    def init(self) -> None:
        """Start keeping signals (tests only); signals emitted before are gone."""
        self._values = deque()
        self._changed = asyncio.Event()

    def signal(self, value: T) -> None:
        """Emit ``value``: kept for a waiting test if one initialised this signal."""
        if self._values is None or self._changed is None:
            return
        self._values.append(value)
        self._changed.set()

    async def wait(self, within: float = DEFAULT_TIMEOUT) -> T:
        """The next value emitted (or already waiting); ``SignalTimeout`` after
        ``within`` seconds."""
        return await self.wait_for(lambda _value: True, within)

    async def wait_for(self, matches: Callable[[T], bool], within: float = DEFAULT_TIMEOUT) -> T:
        """The next value for which ``matches`` is true; earlier values are consumed."""
        if self._values is None or self._changed is None:
            raise RuntimeError(f"test signal {self.name!r} was not initialised (call init())")
        values, changed = self._values, self._changed
        try:
            async with asyncio.timeout(within):
                while True:
                    while values:
                        value = values.popleft()
                        if matches(value):
                            return value
                    changed.clear()
                    await changed.wait()
        except TimeoutError:
            raise SignalTimeout(f"no {self.name} signal within {within:g}s") from None

    def drain(self) -> list[T]:
        """Every value waiting now, without waiting for more."""
        if self._values is None:
            return []
        values = list(self._values)
        self._values.clear()
        return values


class Signals:
    """Base of a component's group of signals (a dataclass of ``TestSignal`` fields)."""

    __test__: ClassVar[bool] = False

    def init(self) -> None:
        """Enable every signal of the group."""
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if isinstance(value, TestSignal):
                value.init()
