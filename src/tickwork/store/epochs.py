"""The scheduler epoch of a shard: fencing of scheduler writes.

A shard's lease (Kubernetes or PostgreSQL) says which replica SHOULD schedule it; the
shard's own ``shard_epoch`` row says whose writes count. A new owner ``take``s the
epoch (one more than before) before its first write, and every scheduler transaction
starts with ``check``: it locks the epoch row for the rest of the transaction and
raises ``Deposed`` when the epoch has moved on. The take waits for the transactions
that checked the old epoch, so a deposed owner (a paused process, a partition, an
expired lease) writes nothing once the new owner has begun.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import asyncpg

from tickwork.store import queries
from tickwork.store.database import Connection

logger = logging.getLogger(__name__)

TAKE_EPOCH: Final = queries.get("take_epoch")
CHECK_EPOCH: Final = queries.get("check_epoch")
CURRENT_EPOCH: Final = queries.get("current_epoch")
EPOCH_LOCK_TIMEOUT: Final = queries.get("epoch_lock_timeout")
END_OLD_EPOCH_SESSIONS: Final = queries.get("end_old_epoch_sessions")
RECORD_PASS: Final = queries.get("record_pass")


class Deposed(Exception):
    """A scheduler write was refused: the shard's epoch is no longer the writer's."""

    def __init__(self, epoch: int, current: int | None, owner: str | None) -> None:
        self.epoch = epoch
        self.current = current
        self.owner = owner
        super().__init__(
            f"epoch {epoch} was deposed: the shard is at epoch {current} (owner {owner})"
        )


@dataclass(frozen=True, slots=True)
class Fence:
    """What a writer checks in each of its transactions: its epoch, and how long its
    session may stall inside a transaction before the server ends it (seconds)."""

    epoch: int
    stall_seconds: float = 10.0

    @property
    def stall_setting(self) -> str:
        return f"{max(1, round(self.stall_seconds * 1000))}ms"


@dataclass(frozen=True, slots=True)
class Holder:
    epoch: int
    owner: str | None
    acquired_at: datetime | None


async def current(conn: Connection) -> Holder:
    row = await conn.fetchrow(CURRENT_EPOCH)
    assert row is not None, "every migrated shard has its epoch row"
    return Holder(row["epoch"], row["owner"], row["acquired_at"])


async def check(conn: Connection, fence: Fence | None) -> None:
    """Inside a transaction: go on only while ``fence`` is the shard's epoch (None:
    an unfenced writer, such as a test or a maintenance tool that owns the shard)."""
    if fence is None:
        return
    row = await conn.fetchrow(CHECK_EPOCH, fence.epoch, fence.stall_setting)
    if row is None:
        holder = await current(conn)
        raise Deposed(fence.epoch, holder.epoch, holder.owner)


async def record_pass(conn: Connection, fence: Fence, now: datetime | None = None) -> datetime:
    """Note the end of a pass of ``fence``'s holder (raises ``Deposed`` when the epoch
    moved on: a deposed owner does not make the shard look scheduled)."""
    ended: datetime | None = await conn.fetchval(RECORD_PASS, fence.epoch, now)
    if ended is None:
        holder = await current(conn)
        raise Deposed(fence.epoch, holder.epoch, holder.owner)
    return ended


async def take(
    conn: Connection,
    owner: str,
    now: datetime | None = None,
    *,
    wait_seconds: float = 1.0,
) -> Holder:
    """Become the shard's epoch holder: the epoch moves on, and every write checked
    against an older one is refused from now on.

    Transactions of the old epoch still in flight are waited for, ``wait_seconds`` at
    most; sessions still holding the old epoch after that (their process paused or cut
    off mid-transaction) are ended, and the take tried once more.
    """
    for attempt in (1, 2):
        try:
            async with conn.transaction():
                await conn.execute(EPOCH_LOCK_TIMEOUT, f"{max(1, round(wait_seconds * 1000))}ms")
                row = await conn.fetchrow(TAKE_EPOCH, owner, now)
        except asyncpg.LockNotAvailableError:
            if attempt == 2:
                raise
            ended = await conn.fetch(END_OLD_EPOCH_SESSIONS)
            logger.warning(
                "the old epoch's transactions did not end within %gs; ended sessions %s",
                wait_seconds,
                [r["pid"] for r in ended if r["ended"]],
                extra={"action": "epoch-wait"},
            )
            continue
        assert row is not None
        return Holder(row["epoch"], row["owner"], row["acquired_at"])
    raise AssertionError("unreachable")
