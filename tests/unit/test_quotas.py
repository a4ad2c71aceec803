"""Per-tenant enqueue rate: a token bucket, refilled by an injected clock."""

from __future__ import annotations

import pytest

from tickwork.core.errors import QuotaExceeded
from tickwork.engine.quotas import EnqueueQuota


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_admitted_then_the_rate_refills_it() -> None:
    clock = Clock()
    quota = EnqueueQuota(rate=10, burst=20, clock=clock)
    quota.take("acme", 20)
    with pytest.raises(QuotaExceeded) as refused:
        quota.take("acme", 1)
    assert refused.value.retry_after == pytest.approx(0.1)
    assert refused.value.slug == "quota-exceeded" and refused.value.status == 429
    clock.now += 0.5  # five runs' worth refilled
    quota.take("acme", 5)
    with pytest.raises(QuotaExceeded):
        quota.take("acme", 1)


def test_tenants_have_buckets_of_their_own() -> None:
    quota = EnqueueQuota(rate=1, burst=1, clock=Clock())
    quota.take("acme")
    quota.take("globex")
    with pytest.raises(QuotaExceeded):
        quota.take("acme")


def test_a_refused_batch_takes_nothing() -> None:
    quota = EnqueueQuota(rate=1, burst=3, clock=Clock())
    with pytest.raises(QuotaExceeded):
        quota.take("acme", 4)
    quota.take("acme", 3)


def test_the_bucket_never_holds_more_than_the_burst() -> None:
    clock = Clock()
    quota = EnqueueQuota(rate=100, burst=2, clock=clock)
    clock.now += 3600
    with pytest.raises(QuotaExceeded):
        quota.take("acme", 3)
