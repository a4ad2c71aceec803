"""The shard lease and the scheduler members of one shard, in its own schema: the
storage of the ``postgres`` coordination backend (``coordination.postgres``).

Every function is one statement (or one short transaction) on the shard's connection;
instants are the database's unless ``now`` pins one (tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.store import queries
from tickwork.store.database import Connection

READ_SHARD_LEASE: Final = queries.get("read_shard_lease")
HOLD_SHARD_LEASE: Final = queries.get("hold_shard_lease")
RELEASE_SHARD_LEASE: Final = queries.get("release_shard_lease")
ANNOUNCE_MEMBER: Final = queries.get("announce_member")
LIVE_MEMBERS: Final = queries.get("live_members")
FORGET_DEPARTED_MEMBERS: Final = queries.get("forget_departed_members")
LEAVE_MEMBERS: Final = queries.get("leave_members")


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
    row = await conn.fetchrow(READ_SHARD_LEASE, now)
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
    row = await conn.fetchrow(HOLD_SHARD_LEASE, holder, lease_seconds, now)
    return row is not None


async def release(conn: Connection, holder: str, now: datetime | None = None) -> bool:
    """Free the lease if ``holder`` has it; False when it did not."""
    return await conn.fetchrow(RELEASE_SHARD_LEASE, holder, now) is not None


async def announce(
    conn: Connection, identity: str, lease_seconds: float, now: datetime | None = None
) -> frozenset[str]:
    """Renew ``identity``'s membership; return the live members, ``identity`` included."""
    async with conn.transaction():
        await conn.execute(ANNOUNCE_MEMBER, identity, lease_seconds, now)
        await conn.execute(FORGET_DEPARTED_MEMBERS, now)
        rows = await conn.fetch(LIVE_MEMBERS, now)
    return frozenset(row["identity"] for row in rows)


async def members(conn: Connection, now: datetime | None = None) -> frozenset[str]:
    """The live members, read only (announcing nobody)."""
    return frozenset(row["identity"] for row in await conn.fetch(LIVE_MEMBERS, now))


async def leave(conn: Connection, identity: str) -> None:
    await conn.execute(LEAVE_MEMBERS, identity)
