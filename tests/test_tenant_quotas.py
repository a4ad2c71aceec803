"""Tenant quotas kept in PostgreSQL: several dispatcher replicas share one enqueue
bucket per tenant and one pending-run cap; per-tenant limits come from the tokens file."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from conftest import ApiServer

from tickwork.api.auth import StaticTokens
from tickwork.api.services import ApiSettings
from tickwork.core.clock import FrozenClock
from tickwork.core.errors import QuotaExceeded
from tickwork.core.spec import JobSpec
from tickwork.engine import quotas
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.quotas import TenantLimits, TenantQuotas
from tickwork.store.database import Database


async def refused(replica: TenantQuotas, count: int = 1) -> QuotaExceeded:
    """What ``replica`` answers when it refuses ``count`` more runs of acme."""
    with pytest.raises(QuotaExceeded) as refusal:
        await replica.admit("acme", count)
    return refusal.value


async def test_replicas_share_one_bucket_per_tenant(database: Database, clock: FrozenClock) -> None:
    limits = TenantLimits(enqueue_rate=2, enqueue_burst=10)
    first, second = (TenantQuotas(database, limits, clock=clock) for _ in range(2))
    await first.admit("acme", 6)
    await second.admit("acme", 4)
    for replica in (first, second):
        assert (await refused(replica)).retry_after == pytest.approx(0.5)
    await first.admit("globex", 10)  # another tenant, another bucket
    clock.advance(1.5)  # three runs' worth, for both replicas together
    await second.admit("acme", 2)
    await first.admit("acme", 1)
    await refused(second)


async def test_a_replica_admits_from_an_allowance_taken_ahead(
    database: Database, clock: FrozenClock
) -> None:
    """One take from the shared bucket covers the next few enqueues of the replica; the
    other replica sees the bucket short by that allowance, never more."""
    limits = TenantLimits(enqueue_rate=1000, enqueue_burst=100)
    ahead = quotas.allowance_ahead(limits)
    assert ahead == 10
    first, second = (TenantQuotas(database, limits, clock=clock) for _ in range(2))
    shard = database.shard_map.shard_of("acme", "")

    async def bucket() -> float:
        async with database.connection(shard) as conn:
            tokens: float = await conn.fetchval(
                "SELECT tokens FROM enqueue_buckets WHERE tenant = 'acme'"
            )
        return tokens

    await first.admit("acme", 1)
    assert await bucket() == 100 - ahead
    for _ in range(int(ahead) - 1):
        await first.admit("acme", 1)  # from the allowance: the bucket is not touched
    assert await bucket() == 100 - ahead
    await first.admit("acme", 1)  # the allowance is spent: another take
    assert await bucket() == 100 - 2 * ahead
    # The other replica gets the rest of the burst, the first what its allowance holds,
    # and neither one run more: together they admitted the burst exactly.
    await second.admit("acme", int(100 - 2 * ahead))
    await refused(second)
    for _ in range(int(ahead) - 1):
        await first.admit("acme", 1)
    await refused(first)


async def test_a_refused_batch_takes_nothing_from_the_shared_bucket(
    database: Database, clock: FrozenClock
) -> None:
    quotas = TenantQuotas(database, TenantLimits(enqueue_rate=1, enqueue_burst=5), clock=clock)
    await refused(quotas, 6)
    await quotas.admit("acme", 5)


async def test_pending_runs_over_the_cap_are_refused(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    await jobs.put("acme", "sync", JobSpec(), "test")
    for _ in range(4):
        await jobs.enqueue("acme", "sync", EnqueueRequest(delay_seconds=60), "test")
    quotas = TenantQuotas(database, TenantLimits(max_pending_runs=5), clock=clock)
    await quotas.admit("acme", 1)
    with pytest.raises(QuotaExceeded, match="pending runs"):
        await quotas.admit("acme", 1)
    # A fresh replica counts the runs on the shards.
    with pytest.raises(QuotaExceeded):
        await TenantQuotas(database, TenantLimits(max_pending_runs=4), clock=clock).admit("acme", 1)
    await TenantQuotas(database, TenantLimits(max_pending_runs=5), clock=clock).admit("acme", 1)


def test_the_tokens_file_sets_quotas_per_tenant(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        "- {token: team-acme-0123456789, tenant: acme, role: team, enqueueRate: 50,\n"
        "   maxPendingRuns: 200000}\n"
        "- {token: work-acme-0123456789, tenant: acme, role: worker, queues: [default]}\n"
        "- {token: team-globex-0123456789, tenant: globex, role: team}\n"
    )
    static = StaticTokens.from_file(tokens)
    settings = ApiSettings(enqueue_burst=100, quota_overrides=static.quota_overrides)
    assert settings.tenant_limits() == {
        "acme": TenantLimits(enqueue_rate=50, enqueue_burst=100, max_pending_runs=200_000)
    }
    assert settings.default_limits() == TenantLimits(enqueue_burst=100)

    tokens.write_text(
        "- {token: team-acme-0123456789, tenant: acme, role: team, enqueueRate: 50}\n"
        "- {token: team-acme-9876543210, tenant: acme, role: team, enqueueRate: 60}\n"
    )
    with pytest.raises(ValueError, match="two different enqueue_rate"):
        StaticTokens.from_file(tokens)
    tokens.write_text("- {token: team-acme-0123456789, tenant: acme, role: team, enqueueRate: 0}\n")
    with pytest.raises(ValueError, match="enqueueRate"):
        StaticTokens.from_file(tokens)


async def test_over_the_shared_quota_the_api_answers_429_with_retry_after(
    api_server: ApiServer, clock: FrozenClock
) -> None:
    api_server.services.quota = TenantQuotas(
        api_server.database, TenantLimits(enqueue_rate=0.5, enqueue_burst=2), clock=clock
    )
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as team:
        assert (await team.put("/v1/jobs/sync", json={})).status_code == 201
        for _ in range(2):
            assert (await team.post("/v1/jobs/sync/runs", json={})).status_code == 201
        refused = await team.post("/v1/jobs/sync/runs", json={})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "2"
        assert refused.json()["type"].endswith("/quota-exceeded")
