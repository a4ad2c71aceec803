"""Which shard schemas this code serves, checked on every new pooled connection.

A shard's schema version is the number of its latest migration; this code's is the
number of its own latest (``migrate.latest_version``). The code serves a shard whose
version is

- its own, or
- ahead of it, when every migration past it says code of this version keeps working:
  each migration records ``compatible_from`` (the oldest code version that still runs
  against a shard with it applied; by default the version just before it, so a release
  serves a shard the next release has already migrated). That is the expand half of the
  expand/contract rule in docs/operations.md (Upgrade): the record is in the shard, so
  the code can judge migrations of releases it never saw.

It does not serve a shard behind it (``tickwork migrate`` has not reached it yet), a
schema that holds another shard (a DSN list in the wrong order, another shard count) or
a shard whose reshard has not finished.

``Database`` checks each connection it opens, so a shard it cannot serve is refused as
an unreachable one is (``ShardNotServed``, a ``ConnectionError``): calls that need it
answer ``503 store-unavailable``, the worker path and the scheduler go on with the
other shards, and the shard is served from the first connection opened after it was
migrated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import asyncpg

from tickwork.core.errors import SchemaMismatch
from tickwork.core.shards import Shard
from tickwork.store import queries

if TYPE_CHECKING:
    from tickwork.store.database import Connection


class SQL(queries.Statements):
    schema_state: str
    serving_identity: str


class SchemaBehind(SchemaMismatch):
    """The shard is at an older schema version than this code: a migration is due."""


@dataclass(frozen=True, slots=True)
class SchemaState:
    version: int  # the latest migration applied; 0 before the first
    floor: int  # the oldest code version that runs against it


def judge(number: int, state: SchemaState, latest: int) -> SchemaMismatch | None:
    """Why code of schema version ``latest`` may not serve shard ``number`` at
    ``state``, or None when it may."""
    if state.version < latest:
        return SchemaBehind(
            f"shard {number} is at schema version {state.version}, this release needs "
            f"{latest}: run `tickwork migrate`",
            summary=f"schema {state.version}, code needs {latest}",
        )
    if state.floor > latest:
        return SchemaMismatch(
            f"shard {number} is at schema version {state.version}, which needs code of "
            f"schema version {state.floor} or later; this release is at {latest}: run a "
            "newer release",
            summary=f"schema {state.version} needs code of schema {state.floor}, code is {latest}",
        )
    return None


async def state_of(conn: Connection) -> SchemaState:
    try:
        row = await conn.fetchrow(SQL.schema_state)
    except asyncpg.UndefinedTableError:
        return SchemaState(0, 0)
    assert row is not None
    return SchemaState(row["version"], row["floor"])


def identity_mismatch(shard: Shard, shard_count: int, found: str) -> SchemaMismatch:
    return SchemaMismatch(
        f"schema {shard.schema} at {redacted(shard.dsn)} should hold shard "
        f"{shard.number} of {shard_count} but holds {found}",
        summary=f"should hold shard {shard.number} of {shard_count} but holds {found}",
    )


async def check(conn: Connection, shard: Shard, shard_count: int, latest: int) -> None:
    """Raise ``SchemaMismatch`` (``SchemaBehind`` for a shard a migration will bring up
    to date) unless code of schema version ``latest`` serves the shard.

    ``conn`` must have the shard's schema on its search path (``database.connect``).
    """
    problem = judge(shard.number, await state_of(conn), latest)
    if problem is not None:
        raise problem
    row = await conn.fetchrow(SQL.serving_identity)
    if row is None or (row["shard"], row["shard_count"]) != (shard.number, shard_count):
        found = "nothing" if row is None else f"shard {row['shard']} of {row['shard_count']}"
        raise identity_mismatch(shard, shard_count, found)
    if row["to_count"] is not None:
        raise SchemaMismatch(
            f"shard {shard.number} is being resharded from {row['from_count']} to "
            f"{row['to_count']} shards and the reshard has not finished: run "
            f"`tickwork reshard --to {row['to_count']}` again to finish it",
            summary="a reshard has not finished",
        )


class ShardNotServed(ConnectionError):
    """A pooled connection refused because this code does not serve the shard now (see
    the module docstring): to its callers, an outage of that shard."""

    def __init__(self, shard: int, mismatch: SchemaMismatch) -> None:
        # The summary: this text reaches authenticated callers in a 503's detail.
        super().__init__(f"shard {shard} is not served: {mismatch.summary}")
        self.shard = shard
        self.mismatch = mismatch


async def admit(conn: Connection, shard: Shard, shard_count: int, latest: int) -> None:
    """``check``, raising ``ShardNotServed``: for a connection a pool is opening."""
    try:
        await check(conn, shard, shard_count, latest)
    except SchemaMismatch as mismatch:
        raise ShardNotServed(shard.number, mismatch) from mismatch


def redacted(dsn: str) -> str:
    """A DSN without its password, for messages."""
    return re.sub(r"(//[^:/@]+):[^@]*@", r"\1:***@", dsn)
