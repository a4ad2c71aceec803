"""Shard maps and run ids: every dispatcher routes a run id to the same shard."""

from __future__ import annotations

import pytest

from tickwork.core import hashing, shards
from tickwork.core.errors import NotFound
from tickwork.core.shards import Shard, ShardMap


def test_one_dsn_means_every_shard_on_that_server_with_its_own_schema() -> None:
    shard_map = ShardMap.from_dsns(["postgresql://db/tickwork"])
    assert shard_map.count == shards.DEFAULT_SHARD_COUNT == 16
    assert {s.dsn for s in shard_map.shards} == {"postgresql://db/tickwork"}
    assert [s.schema for s in shard_map.shards] == [f"tickwork_shard_{n}" for n in range(16)]


def test_one_dsn_with_an_explicit_count() -> None:
    shard_map = ShardMap.from_dsns(["postgresql://db/x"], 4)
    assert shard_map.count == 4
    assert shard_map[3] == Shard(3, "postgresql://db/x")


def test_one_dsn_per_shard_keeps_their_order() -> None:
    dsns = ["postgresql://a/x", "postgresql://b/x", "postgresql://c/x"]
    shard_map = ShardMap.from_dsns(dsns)
    assert [(s.number, s.dsn) for s in shard_map.shards] == list(enumerate(dsns))
    assert ShardMap.from_dsns(dsns, 3) == shard_map


def test_a_dsn_list_that_disagrees_with_the_count_is_refused() -> None:
    with pytest.raises(ValueError, match="2 database URLs given for 3 shards"):
        ShardMap.from_dsns(["postgresql://a/x", "postgresql://b/x"], 3)


def test_no_dsn_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ShardMap.from_dsns([])


def test_shards_must_be_numbered_in_order() -> None:
    with pytest.raises(ValueError, match="numbered"):
        ShardMap((Shard(1, "x"), Shard(0, "y")))
    with pytest.raises(ValueError, match="numbered"):
        ShardMap((Shard(0, "x"), Shard(2, "y")))
    with pytest.raises(ValueError, match="at least one"):
        ShardMap(())


def test_a_job_lives_on_its_hashed_shard() -> None:
    shard_map = ShardMap.from_dsns(["postgresql://db/x"], 16)
    for i in range(100):
        assert shard_map.shard_of("acme", f"job-{i}") == hashing.shard_of("acme", f"job-{i}", 16)


def test_jobs_of_one_tenant_use_every_shard() -> None:
    shard_map = ShardMap.from_dsns(["postgresql://db/x"], 4)
    assert {shard_map.shard_of("acme", f"job-{i}") for i in range(100)} == {0, 1, 2, 3}


@pytest.mark.parametrize(("shard", "local"), [(0, 1), (3, 42), (15, 2**63 - 1), (9999, 7)])
def test_run_ids_round_trip(shard: int, local: int) -> None:
    run_id = shards.format_run_id(shard, local)
    assert run_id == f"r{shard}-{local}"
    assert shards.parse_run_id(run_id, 10_000) == (shard, local)


@pytest.mark.parametrize(
    "run_id",
    [
        "",
        "r",
        "r1",
        "r1-",
        "1-5",
        "x1-5",
        "r-1-5",
        "r1-5x",
        " r1-5",
        "r1-5\n",
        "r1-0x10",
        "r123456-1",
        "r1-99999999999999999999",
        f"r1-{2**63}",
        "r16-1",  # shard out of range for 16 shards
        "r01-5",  # another spelling of r1-5
        "r1-005",
        "r\u0661-5",  # a non-ASCII digit
    ],
)
def test_malformed_or_foreign_run_ids_are_not_found(run_id: str) -> None:
    with pytest.raises(NotFound) as caught:
        shards.parse_run_id(run_id, 16)
    assert caught.value.field == "runId"
    assert caught.value.status == 404


def test_schema_names() -> None:
    assert shards.schema_name(0) == "tickwork_shard_0"
    assert Shard(12, "x").schema == "tickwork_shard_12"
