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

A quota is a guard, not the store: a shard that cannot be read must not fail enqueues
to the other shards. A shard that does not answer a quota read within ``WAIT_SECONDS``
(or fails it) is asked again only after a backoff, and meanwhile the replica goes on
without it: the pending count takes that shard's last known count (0 when it never
answered), and while the tenant's bucket shard does not answer the replica admits the
tenant from a bucket of its own with the tenant's rate and burst (so N replicas admit
at most N times the quota while it lasts). docs/operations.md (Quotas) says so.

``EnqueueQuota`` is the same bucket held in one process (each API process its own).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.errors import QuotaExceeded
from tickwork.core.settings import TenantLimits
from tickwork.engine.shard_health import ShardHealth
from tickwork.store import outages, quotas
from tickwork.store.database import Connection, Database

logger = logging.getLogger(__name__)
T = TypeVar("T")

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
# How long an enqueue waits for a quota read of a shard, and of a shard that failed
# one lately (its backoff over): healthy reads take a millisecond.
WAIT_SECONDS: Final = 0.5
PROBE_SECONDS: Final = 0.1


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
    counts: dict[int, int] = field(default_factory=dict)  # per shard, as last read
    at: float = float("-inf")  # when the shards were last asked
    added: int = 0  # runs admitted since

    @property
    def count(self) -> int:
        return sum(self.counts.values()) + self.added


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
        *,
        wait_seconds: float = WAIT_SECONDS,
        probe_seconds: float = PROBE_SECONDS,
    ) -> None:
        self.database = database
        self.defaults = defaults or TenantLimits()
        self.per_tenant = dict(per_tenant or {})
        self.clock = clock or DatabaseClock()
        self.wait_seconds = wait_seconds
        self.probe_seconds = probe_seconds
        self._monotonic = monotonic
        self._pending: dict[str, _Pending] = {}
        self._allowances: dict[str, _Allowance] = {}
        # Shards whose quota read failed or came late, asked again after a backoff.
        self.health = ShardHealth(monotonic=monotonic)
        # While a tenant's bucket shard does not answer: the replica's own bucket.
        self._local: dict[str, EnqueueQuota] = {}
        self._late: set[asyncio.Task[object]] = set()

    def limits_of(self, tenant: str) -> TenantLimits:
        return self.per_tenant.get(tenant, self.defaults)

    async def admit(self, tenant: str, runs: int) -> None:
        limits = self.limits_of(tenant)
        pending = await self._pending_count(tenant, limits.max_pending_runs)
        if pending.count + runs > limits.max_pending_runs:
            raise QuotaExceeded(
                f"tenant {tenant!r} has {pending.count} pending runs, its limit is "
                f"{limits.max_pending_runs}; retry when some have run",
                retry_after=_PENDING_NEAR_SECONDS,
            )
        now = self._monotonic()
        allowance = self._allowances.get(tenant)
        if allowance is not None and allowance.until > now and allowance.tokens >= runs:
            allowance.tokens -= runs
        else:
            shard = self.database.shard_map.shard_of(tenant, "")
            take = await self._ask(shard, lambda conn: self._take(conn, tenant, runs, limits))
            if take is None:
                self._local_bucket(tenant, limits).take(tenant, runs)
            elif not take.admitted:
                wait = (runs - take.tokens_left) / limits.enqueue_rate
                raise _over_rate(tenant, limits.enqueue_rate, limits.enqueue_burst, wait)
            else:
                self._allowances[tenant] = _Allowance(take.taken - runs, now + ALLOWANCE_SECONDS)
        self._pending[tenant].added += runs

    async def _take(
        self, conn: Connection, tenant: str, runs: int, limits: TenantLimits
    ) -> quotas.Take:
        return await quotas.take_enqueue_tokens(
            conn,
            tenant,
            runs,
            limits.enqueue_rate,
            limits.enqueue_burst,
            self.clock.now(),
            ahead=allowance_ahead(limits),
        )

    def _local_bucket(self, tenant: str, limits: TenantLimits) -> EnqueueQuota:
        bucket = self._local.get(tenant)
        if bucket is None or (bucket.rate, bucket.burst) != (
            limits.enqueue_rate,
            limits.enqueue_burst,
        ):
            bucket = self._local[tenant] = EnqueueQuota(
                limits.enqueue_rate, limits.enqueue_burst, self._monotonic
            )
        return bucket

    async def _pending_count(self, tenant: str, limit: int) -> _Pending:
        now = self._monotonic()
        known = self._pending.get(tenant)
        if known is not None:
            fresh = _PENDING_NEAR_SECONDS if known.count * 2 > limit else _PENDING_FRESH_SECONDS
            if now - known.at < fresh:
                return known
        counts = await asyncio.gather(
            *(
                self._ask(shard, lambda conn: quotas.pending_runs(conn, tenant, limit + 1))
                for shard in range(self.database.shard_count)
            )
        )
        before = known.counts if known is not None else {}
        # A shard that did not answer keeps its last count (none yet: 0).
        found = {
            shard: before.get(shard, 0) if count is None else count
            for shard, count in enumerate(counts)
        }
        pending = self._pending[tenant] = _Pending(found, now)
        return pending

    async def _ask(self, shard: int, read: Callable[[Connection], Awaitable[T]]) -> T | None:
        """``read`` on ``shard``, or None when the shard did not answer in time, failed
        with an outage, or is in its backoff after one."""
        health = self.health
        if health.skipping(shard):
            return None

        async def asked() -> T:
            async with self.database.connection(shard) as conn:
                return await read(conn)

        task = asyncio.create_task(asked())
        bound = self.probe_seconds if health.suspect(shard) else self.wait_seconds
        done, _ = await asyncio.wait({task}, timeout=bound)
        if not done:
            # Left to end on its own, within the pool's bounds: a take that lands late
            # took tokens nobody uses, which errs on the safe side.
            self._late.add(task)
            task.add_done_callback(self._forget)
            self._failed(shard, f"no answer within {bound:g}s")
            return None
        try:
            result = task.result()
        except Exception as error:
            if not outages.is_outage(error):
                raise
            self._failed(shard, outages.describe(error))
            return None
        health.succeeded(shard)
        return result

    def _failed(self, shard: int, why: str) -> None:
        pause = self.health.failed(shard)
        logger.warning(
            "shard %d: quota read failed (%s); quotas go on without it for %.1fs",
            shard,
            why,
            pause,
            extra={"action": "quota-degraded", "shard": shard},
        )

    def _forget(self, task: asyncio.Task[object]) -> None:
        self._late.discard(task)
        error = None if task.cancelled() else task.exception()
        # An outage of a late read is not news (it was counted); anything else is a bug.
        if error is not None and not outages.is_outage(error):
            logger.error(
                "a late quota read failed", exc_info=error, extra={"action": "quota-error"}
            )
