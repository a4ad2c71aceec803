"""The shard lease and the scheduler members of one shard, in its own schema: the
storage of the ``postgres`` coordination backend (``coordination.postgres``).

Every function is one statement (or one short transaction) on the shard's connection;
instants are the database's unless ``now`` pins one (tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    read_shard_lease: str
    hold_shard_lease: str
    release_shard_lease: str
    announce_member: str
    live_members: str
    forget_departed_members: str
    leave_members: str


@dataclass(frozen=True, slots=True)
class Record:
    """A shard's lease as stored."""

    holder: str | None
    lease_seconds: float
    acquired_at: datetime | None
    renewed_at: datetime | None
    transitions: int
    # Seconds until it expires by the database clock (<= 0: expired; None: never taken).
    remaining: float | None


async def read(conn: Connection, now: datetime | None = None) -> Record:
    row = await conn.fetchrow(SQL.read_shard_lease, now)
    assert row is not None, "every migrated shard has its lease row"
    return Record(
        row["holder"],
        row["lease_seconds"],
        row["acquired_at"],
        row["renewed_at"],
        row["transitions"],
        row["remaining"],
    )


async def hold(
    conn: Connection, holder: str, lease_seconds: float, now: datetime | None = None
) -> bool:
    """Take or renew the lease for ``holder``; False while another holder's lease runs."""
    row = await conn.fetchrow(SQL.hold_shard_lease, holder, lease_seconds, now)
    return row is not None


async def release(conn: Connection, holder: str, now: datetime | None = None) -> bool:
    """Free the lease if ``holder`` has it; False when it did not."""
    return await conn.fetchrow(SQL.release_shard_lease, holder, now) is not None


async def announce(
    conn: Connection, identity: str, lease_seconds: float, now: datetime | None = None
) -> frozenset[str]:
    """Renew ``identity``'s membership; return the live members, ``identity`` included."""
    async with conn.transaction():
        await conn.execute(SQL.announce_member, identity, lease_seconds, now)
        await conn.execute(SQL.forget_departed_members, now)
        rows = await conn.fetch(SQL.live_members, now)
    return frozenset(row["identity"] for row in rows)


async def members(conn: Connection, now: datetime | None = None) -> frozenset[str]:
    """The live members, read only (announcing nobody)."""
    return frozenset(row["identity"] for row in await conn.fetch(SQL.live_members, now))


async def leave(conn: Connection, identity: str) -> None:
    await conn.execute(SQL.leave_members, identity)
