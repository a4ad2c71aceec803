"""Clocks. Production uses the database clock: every SQL statement reads
``coalesce($n::timestamptz, now())``, and ``DatabaseClock.now()`` is ``None``. Tests
inject a ``FrozenClock`` to pin exact instants and move time without sleeping.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime | None:
        """The instant to use, or ``None`` for the database's own ``now()``."""


class DatabaseClock:
    def now(self) -> None:
        return None


class FrozenClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FrozenClock needs an aware datetime")
        self._now = start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, instant: datetime) -> None:
        self._now = instant.astimezone(UTC)
