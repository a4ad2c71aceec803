"""Per-tenant enqueue rate limits: a token bucket per tenant.

A runaway enqueue loop in one team must not fill the shards for everyone. Each API
process keeps its own buckets (N dispatchers admit up to N times the rate); the clock is
injected so tests need not wait for refills.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tickwork.core.errors import QuotaExceeded


@dataclass
class _Bucket:
    tokens: float
    at: float


class EnqueueQuota:
    def __init__(
        self,
        rate: float,
        burst: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("an enqueue quota needs rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def take(self, tenant: str, runs: int = 1) -> None:
        """Admit ``runs`` enqueues for ``tenant`` or raise ``QuotaExceeded``."""
        now = self._clock()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(self.burst, now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
        bucket.at = now
        if runs > bucket.tokens:
            wait = (runs - bucket.tokens) / self.rate
            raise QuotaExceeded(
                f"tenant {tenant!r} is over its enqueue rate ({self.rate:g} runs/s, bursts of "
                f"{self.burst:g}); retry in {wait:.1f} s",
                retry_after=wait,
            )
        bucket.tokens -= runs
