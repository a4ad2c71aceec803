"""Tenant quotas while shards do not answer: they degrade instead of failing enqueues.

A shard whose pending count cannot be read counts with its last known count (0 when it
never answered); while the tenant's bucket shard does not answer, the replica admits the
tenant from a bucket of its own with the tenant's rate and burst; once the shard answers
again, the shared bucket is back. Time is the test's (an injected monotonic clock).
"""

from __future__ import annotations

import pytest

from faults.conftest import FAST_POOLS, SHARDS, proxied_map
from faults.proxy import TcpProxy
from tickwork.core import hashing
from tickwork.core.errors import QuotaExceeded
from tickwork.core.settings import TenantLimits
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.quotas import TenantQuotas
from tickwork.store.database import Database

BUCKET = hashing.shard_of("acme", "", SHARDS)  # where acme's enqueue bucket lives
PENDING = next(s for s in range(SHARDS) if s != BUCKET)  # where acme's runs wait


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cut(proxy: TcpProxy) -> None:
    """The shard's server restarting: open links gone, new ones refused at once."""
    proxy.starting_up()
    proxy.reset()


async def bucket_tokens(direct: Database) -> float:
    async with direct.connection(BUCKET) as conn:
        tokens: float = await conn.fetchval(
            "SELECT tokens FROM enqueue_buckets WHERE tenant = 'acme'"
        )
    return tokens


async def test_quotas_go_on_without_the_shards_that_do_not_answer(
    fault_url: str, proxies: list[TcpProxy]
) -> None:
    async with (
        Database(proxied_map(fault_url, proxies), FAST_POOLS) as database,
        Database(ShardMap.from_dsns([fault_url], SHARDS)) as direct,
    ):
        jobs = Jobs(direct)
        job = next(f"job-{n}" for n in range(100) if jobs.shard_of("acme", f"job-{n}") == PENDING)
        await jobs.put("acme", job, JobSpec(), "test")
        for _ in range(3):
            await jobs.enqueue("acme", job, EnqueueRequest(delay_seconds=600), "test")
        clock = Monotonic()
        limits = TenantLimits(enqueue_rate=2, enqueue_burst=4, max_pending_runs=5)
        quotas = TenantQuotas(database, limits, monotonic=clock)
        await quotas.admit("acme", 1)  # 3 pending read, the shared bucket taken
        assert await bucket_tokens(direct) < 4

        cut(proxies[PENDING])
        cut(proxies[BUCKET])
        clock.now += 60  # the pending count is stale: the shards are asked again
        # The cut shard counts with its last known 3 runs, the bucket is the replica's.
        await quotas.admit("acme", 1)
        await quotas.admit("acme", 1)  # 3 read + 2 admitted since: the cap of 5
        with pytest.raises(QuotaExceeded, match="pending runs"):
            await quotas.admit("acme", 1)

        # A replica that never read the cut shard counts 0 there; its own bucket holds
        # the tenant's burst, then its rate.
        fresh = TenantQuotas(
            database, TenantLimits(enqueue_rate=2, enqueue_burst=4), monotonic=clock
        )
        for _ in range(4):
            await fresh.admit("acme", 1)
        with pytest.raises(QuotaExceeded, match="enqueue rate") as refused:
            await fresh.admit("acme", 1)
        assert refused.value.retry_after == pytest.approx(0.5)
        clock.now += 1  # two runs' worth
        await fresh.admit("acme", 1)
        await fresh.admit("acme", 1)
        with pytest.raises(QuotaExceeded, match="enqueue rate"):
            await fresh.admit("acme", 1)

        # The bucket's shard answers again: the shared bucket is taken from again.
        left = await bucket_tokens(direct)
        proxies[BUCKET].heal()
        clock.now += 10  # past the backoff
        await fresh.admit("acme", 1)
        assert await bucket_tokens(direct) != left
