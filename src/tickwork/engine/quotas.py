"""Per-tenant quotas: an enqueue rate (token bucket) and a cap on pending runs
(``TenantLimits``, from ``ApiSettings`` and the tokens file).

A runaway enqueue loop in one team must not fill the shards for everyone. Over a quota
an enqueue gets ``429 quota-exceeded`` with ``Retry-After``.

``TenantQuotas`` keeps the accounting in PostgreSQL, so the limits hold across every
dispatcher replica: the bucket is one row per tenant (on the shard a hash of the tenant
picks), taken in one statement, whatever the batch size, with a small allowance ahead
that the replica admits from locally for a moment (``AHEAD_SECONDS``). The pending count
is read from the shards at most every few seconds and advanced locally in between, so
replicas together may overshoot the cap by what they admit in that window.

``EnqueueQuota`` is the same bucket held in one process (each API process its own).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.errors import QuotaExceeded
from tickwork.core.settings import TenantLimits
from tickwork.store import quotas
from tickwork.store.database import Database

# How old a pending count may be when the tenant is far from / near its cap.
_PENDING_FRESH_SECONDS: Final = 10.0
_PENDING_NEAR_SECONDS: Final = 1.0
# A take from the shared bucket gets an allowance ahead when the bucket holds it: this
# long of the tenant's rate (at most a tenth of its burst), admitted locally for at
# most ALLOWANCE_SECONDS and dropped after. With the defaults (1 000 runs/s) that is 50
# runs, so a replica makes one round trip to the bucket per 50 single enqueues rather
# than one per enqueue, and N replicas together may admit at most N x 50 runs more
# than the bucket in any window (tokens taken ahead are never given back).
AHEAD_SECONDS: Final = 0.05
ALLOWANCE_SECONDS: Final = 1.0


class Admission(Protocol):
    async def admit(self, tenant: str, runs: int) -> None:
        """Admit ``runs`` enqueues for ``tenant`` or raise ``QuotaExceeded``."""


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

    async def admit(self, tenant: str, runs: int) -> None:
        self.take(tenant, runs)

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
            raise _over_rate(tenant, self.rate, self.burst, wait)
        bucket.tokens -= runs


def _over_rate(tenant: str, rate: float, burst: float, wait: float) -> QuotaExceeded:
    return QuotaExceeded(
        f"tenant {tenant!r} is over its enqueue rate ({rate:g} runs/s, bursts of "
        f"{burst:g}); retry in {wait:.1f} s",
        retry_after=wait,
    )


@dataclass
class _Pending:
    count: int
    at: float


@dataclass
class _Allowance:
    tokens: float
    until: float


def allowance_ahead(limits: TenantLimits) -> float:
    """The tokens a take asks for ahead (see AHEAD_SECONDS)."""
    return min(limits.enqueue_rate * AHEAD_SECONDS, limits.enqueue_burst / 10)


class TenantQuotas:
    """Quotas shared by every replica through PostgreSQL (see the module docstring)."""

    def __init__(
        self,
        database: Database,
        defaults: TenantLimits | None = None,
        per_tenant: Mapping[str, TenantLimits] | None = None,
        clock: Clock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database = database
        self.defaults = defaults or TenantLimits()
        self.per_tenant = dict(per_tenant or {})
        self.clock = clock or DatabaseClock()
        self._monotonic = monotonic
        self._pending: dict[str, _Pending] = {}
        self._allowances: dict[str, _Allowance] = {}

    def limits_of(self, tenant: str) -> TenantLimits:
        return self.per_tenant.get(tenant, self.defaults)

    async def admit(self, tenant: str, runs: int) -> None:
        limits = self.limits_of(tenant)
        pending = await self._pending_count(tenant, limits.max_pending_runs)
        if pending + runs > limits.max_pending_runs:
            raise QuotaExceeded(
                f"tenant {tenant!r} has {pending} pending runs, its limit is "
                f"{limits.max_pending_runs}; retry when some have run",
                retry_after=_PENDING_NEAR_SECONDS,
            )
        now = self._monotonic()
        allowance = self._allowances.get(tenant)
        if allowance is not None and allowance.until > now and allowance.tokens >= runs:
            allowance.tokens -= runs
        else:
            shard = self.database.shard_map.shard_of(tenant, "")
            async with self.database.connection(shard) as conn:
                take = await quotas.take_enqueue_tokens(
                    conn,
                    tenant,
                    runs,
                    limits.enqueue_rate,
                    limits.enqueue_burst,
                    self.clock.now(),
                    ahead=allowance_ahead(limits),
                )
            if not take.admitted:
                wait = (runs - take.tokens_left) / limits.enqueue_rate
                raise _over_rate(tenant, limits.enqueue_rate, limits.enqueue_burst, wait)
            self._allowances[tenant] = _Allowance(take.taken - runs, now + ALLOWANCE_SECONDS)
        self._pending[tenant].count += runs

    async def _pending_count(self, tenant: str, limit: int) -> int:
        now = self._monotonic()
        known = self._pending.get(tenant)
        if known is not None:
            fresh = _PENDING_NEAR_SECONDS if known.count * 2 > limit else _PENDING_FRESH_SECONDS
            if now - known.at < fresh:
                return known.count

        async def one(shard: int) -> int:
            async with self.database.connection(shard) as conn:
                return await quotas.pending_runs(conn, tenant, limit + 1)

        counts = await asyncio.gather(*(one(s) for s in range(self.database.shard_count)))
        self._pending[tenant] = _Pending(sum(counts), now)
        return sum(counts)
