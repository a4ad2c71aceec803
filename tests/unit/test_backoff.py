"""Retry delays: ``uniform(0, min(maxSeconds, baseSeconds * 2^(n-1)))`` before retry n."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from tickwork.core import backoff


@pytest.mark.parametrize(
    ("retry_number", "expected"),
    [(1, 30.0), (2, 60.0), (3, 120.0), (4, 240.0), (6, 960.0), (7, 1800.0), (50, 1800.0)],
)
def test_ceiling_doubles_from_base_up_to_max(retry_number: int, expected: float) -> None:
    assert backoff.ceiling(retry_number, 30, 1800) == expected


def test_ceiling_of_a_huge_retry_number_is_the_cap_not_an_overflow() -> None:
    assert backoff.ceiling(10_000, 0.5, 3600) == 3600
    assert backoff.ceiling(10_000, 86_400, 7 * 86_400) == 7 * 86_400


def test_zero_base_means_immediate_retries() -> None:
    for n in range(1, 10):
        assert backoff.delay(n, 0, 0, random.Random(n)) == timedelta(0)


@pytest.mark.parametrize("retry_number", [0, -1])
def test_retry_numbers_start_at_one(retry_number: int) -> None:
    with pytest.raises(ValueError, match="starts at 1"):
        backoff.ceiling(retry_number, 30, 1800)
    with pytest.raises(ValueError, match="starts at 1"):
        backoff.delay(retry_number, 30, 1800)


@pytest.mark.parametrize("retry_number", [1, 2, 3, 8])
def test_delay_stays_within_the_full_jitter_window(retry_number: int) -> None:
    rng = random.Random(retry_number)
    upper = backoff.ceiling(retry_number, 10, 300)
    draws = [backoff.delay(retry_number, 10, 300, rng).total_seconds() for _ in range(2000)]
    assert all(0 <= d <= upper for d in draws)
    # Full jitter: the whole window is used, not just its top (no lockstep retries).
    assert min(draws) < 0.05 * upper
    assert max(draws) > 0.95 * upper
    assert 0.4 * upper < sum(draws) / len(draws) < 0.6 * upper


def test_same_seed_gives_same_delays() -> None:
    first = [backoff.delay(n, 5, 500, random.Random(7)) for n in range(1, 8)]
    second = [backoff.delay(n, 5, 500, random.Random(7)) for n in range(1, 8)]
    assert first == second


def test_default_rng_spreads_a_burst_of_failures() -> None:
    delays = {backoff.delay(1, 60, 600) for _ in range(50)}
    assert len(delays) > 40
    assert all(timedelta(0) <= d <= timedelta(seconds=60) for d in delays)
