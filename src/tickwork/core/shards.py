"""Shards: which PostgreSQL database (and schema) holds a job, and how run ids route.

S shards are chosen at install time (``tickwork reshard`` doubles them). The shard of
a job is a stable hash of ``tenant/name`` modulo S; a run id encodes its shard, so any
dispatcher routes a heartbeat or a completion with no lookup (an id of a run a reshard
moved is forwarded by its old shard). Shards may share one server (one DSN for
all, a schema each: development) or each have their own DSN (production).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tickwork.core import hashing
from tickwork.core.errors import NotFound

DEFAULT_SHARD_COUNT: Final = 16
# Canonical ids only (ASCII digits, no leading zeros): one run, one public id.
_RUN_ID: Final = re.compile(r"r(0|[1-9][0-9]{0,4})-(0|[1-9][0-9]{0,18})")


def schema_name(shard: int) -> str:
    """The schema a shard's tables live in, whichever database holds it."""
    return f"tickwork_shard_{shard}"


@dataclass(frozen=True, slots=True)
class Shard:
    number: int
    dsn: str

    @property
    def schema(self) -> str:
        return schema_name(self.number)


@dataclass(frozen=True)
class ShardMap:
    """The shards of one installation."""

    shards: tuple[Shard, ...]

    @classmethod
    def from_dsns(cls, dsns: Sequence[str], count: int | None = None) -> ShardMap:
        """One DSN for every shard, or exactly one DSN per shard."""
        if not dsns:
            raise ValueError("at least one database URL is needed")
        if len(dsns) == 1:
            total = count or DEFAULT_SHARD_COUNT
            return cls(tuple(Shard(n, dsns[0]) for n in range(total)))
        if count is not None and count != len(dsns):
            raise ValueError(f"{len(dsns)} database URLs given for {count} shards")
        return cls(tuple(Shard(n, dsn) for n, dsn in enumerate(dsns)))

    def __post_init__(self) -> None:
        if not self.shards:
            raise ValueError("a shard map needs at least one shard")
        if [s.number for s in self.shards] != list(range(len(self.shards))):
            raise ValueError("shards must be numbered 0..S-1 in order")

    @property
    def count(self) -> int:
        return len(self.shards)

    def shard_of(self, tenant: str, name: str) -> int:
        return hashing.shard_of(tenant, name, self.count)

    def __getitem__(self, number: int) -> Shard:
        return self.shards[number]


def format_run_id(shard: int, local_id: int) -> str:
    """The public id of run ``local_id`` of shard ``shard``: opaque to clients."""
    return f"r{shard}-{local_id}"


def parse_run_id(run_id: str, shard_count: int) -> tuple[int, int]:
    """``(shard, local id)`` of a public run id; ``NotFound`` for anything malformed."""
    match = _RUN_ID.fullmatch(run_id)
    if match is None:
        raise NotFound(f"no run {run_id!r}", field="runId")
    shard, local_id = int(match.group(1)), int(match.group(2))
    if shard >= shard_count or local_id >= 2**63:
        raise NotFound(f"no run {run_id!r}", field="runId")
    return shard, local_id
