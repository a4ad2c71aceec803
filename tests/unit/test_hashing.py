"""Stable hashes: a job's shard and its jitter offset never move between releases, and
spread evenly (that they never move between processes needs a process of its own:
tests/test_hashing.py)."""

from __future__ import annotations

import collections

import pytest

from tickwork.core import hashing

# Pinned values: changing them moves every installed job to another shard (its runs
# become unreachable) and shifts every job's fire time. Never update them casually.
PINNED = [
    ("billing", "export-invoices", 16, 1, 60, 11),
    ("acme", "nightly", 4, 3, 3600, 3317),
]


@pytest.mark.parametrize(("tenant", "name", "shards", "shard", "jitter", "offset"), PINNED)
def test_values_are_stable_across_releases(
    tenant: str, name: str, shards: int, shard: int, jitter: int, offset: int
) -> None:
    assert hashing.shard_of(tenant, name, shards) == shard
    assert hashing.jitter_offset(tenant, name, jitter) == offset


def test_stable_hash_is_pinned() -> None:
    key = hashing.job_key("billing", "export-invoices")
    assert key == "billing/export-invoices"
    assert hashing.stable_hash(key, hashing.SHARD_PURPOSE) == 16957908794237520865
    assert hashing.stable_hash(key, hashing.JITTER_PURPOSE) == 16771779397231326551


def test_tenant_is_part_of_the_identity() -> None:
    names = [f"job-{i}" for i in range(200)]
    a = [hashing.shard_of("team-a", n, 16) for n in names]
    b = [hashing.shard_of("team-b", n, 16) for n in names]
    assert a != b


def test_jobs_spread_evenly_over_shards() -> None:
    counts = collections.Counter(hashing.shard_of("t", f"job-{i}", 16) for i in range(16_000))
    assert sorted(counts) == list(range(16))
    # 1000 expected per shard; a binomial sd is ~31, so ±15 % is > 4.5 sd.
    assert all(850 <= c <= 1150 for c in counts.values()), counts


def test_jitter_offsets_fill_the_window() -> None:
    offsets = collections.Counter(hashing.jitter_offset("t", f"job-{i}", 60) for i in range(6000))
    assert sorted(offsets) == list(range(60))
    assert all(60 <= c <= 140 for c in offsets.values()), offsets


def test_jitter_is_independent_of_the_shard() -> None:
    """Jobs of one shard still spread over the whole jitter window (16 shards, 60 s)."""
    on_shard_zero = [
        f"job-{i}" for i in range(16_000) if hashing.shard_of("t", f"job-{i}", 16) == 0
    ]
    offsets = {hashing.jitter_offset("t", name, 60) for name in on_shard_zero}
    assert len(offsets) == 60


@pytest.mark.parametrize("jitter", [0, -5])
def test_no_jitter_pins_the_exact_time(jitter: int) -> None:
    assert all(hashing.jitter_offset("t", f"job-{i}", jitter) == 0 for i in range(100))


def test_one_second_jitter_is_always_zero() -> None:
    assert {hashing.jitter_offset("t", f"job-{i}", 1) for i in range(100)} == {0}


@pytest.mark.parametrize("count", [0, -1])
def test_a_shard_count_below_one_is_refused(count: int) -> None:
    with pytest.raises(ValueError, match="shard_count"):
        hashing.shard_of("t", "job", count)


def test_non_ascii_names_hash_like_any_other() -> None:
    assert 0 <= hashing.shard_of("équipe", "rapport-journalier", 16) < 16
    assert hashing.shard_of("équipe", "r", 16) == hashing.shard_of("équipe", "r", 16)
