"""Which shards the worker path should leave alone for now: a shard whose claim failed
(its database down, or no answer in time) is skipped for a backoff that doubles with
each failure, so lease requests are served from the other shards at full speed
instead of each waiting on the broken one. The first request after the backoff tries
it again."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tickwork.core import backoff


@dataclass(eq=False, kw_only=True)
class ShardHealth:
    base_seconds: float = 0.5
    max_seconds: float = 5.0
    monotonic: Callable[[], float] = time.monotonic
    _failures: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _retry_at: dict[int, float] = field(default_factory=dict, init=False, repr=False)

    def skipping(self, shard: int) -> bool:
        """Whether to leave ``shard`` out now (it failed, and its backoff runs)."""
        return self._retry_at.get(shard, 0.0) > self.monotonic()

    def suspect(self, shard: int) -> bool:
        """Whether ``shard`` failed and has not succeeded since."""
        return shard in self._failures

    def failed(self, shard: int) -> float:
        """Count a failure; returns the seconds the shard is skipped for."""
        failures = self._failures.get(shard, 0) + 1
        self._failures[shard] = failures
        pause = backoff.ceiling(failures, self.base_seconds, self.max_seconds)
        self._retry_at[shard] = self.monotonic() + pause
        return pause

    def succeeded(self, shard: int) -> None:
        self._failures.pop(shard, None)
        self._retry_at.pop(shard, None)

    def failing(self) -> list[int]:
        """The shards whose last claim failed."""
        return sorted(self._failures)
