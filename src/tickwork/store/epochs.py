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

import asyncpg

from tickwork.store import queries
from tickwork.store.database import Connection

logger = logging.getLogger(__name__)


class SQL(queries.Statements):
    take_epoch: str
    check_epoch: str
    current_epoch: str
    epoch_lock_timeout: str
    end_old_epoch_sessions: str
    record_pass: str


class Deposed(Exception):
    """A scheduler write was refused: the shard's epoch is no longer the writer's."""

    def __init__(self, epoch: int, current: int | None, owner: str | None) -> None:
        self.epoch = epoch
        self.current = current
        self.owner = owner
        super().__init__(
            f"epoch {epoch} was deposed: the shard is at epoch {current} (owner {owner})"
        )


class Resharding(Exception):
    """The shard is being resharded (``tickwork reshard`` has not finished): no
    scheduler may take it."""


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
    row = await conn.fetchrow(SQL.current_epoch)
    assert row is not None, "every migrated shard has its epoch row"
    return Holder(row["epoch"], row["owner"], row["acquired_at"])


async def check(conn: Connection, fence: Fence | None) -> None:
    """Inside a transaction: go on only while ``fence`` is the shard's epoch (None:
    an unfenced writer, such as a test or a maintenance tool that owns the shard)."""
    if fence is None:
        return
    row = await conn.fetchrow(SQL.check_epoch, fence.epoch, fence.stall_setting)
    if row is None:
        holder = await current(conn)
        raise Deposed(fence.epoch, holder.epoch, holder.owner)


async def record_pass(conn: Connection, fence: Fence, now: datetime | None = None) -> datetime:
    """Note the end of a pass of ``fence``'s holder (raises ``Deposed`` when the epoch
    moved on: a deposed owner does not make the shard look scheduled)."""
    ended: datetime | None = await conn.fetchval(SQL.record_pass, fence.epoch, now)
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
                await conn.execute(
                    SQL.epoch_lock_timeout, f"{max(1, round(wait_seconds * 1000))}ms"
                )
                row = await conn.fetchrow(SQL.take_epoch, owner, now)
        except asyncpg.LockNotAvailableError:
            if attempt == 2:
                raise
            ended = await conn.fetch(SQL.end_old_epoch_sessions)
            logger.warning(
                "the old epoch's transactions did not end within %gs; ended sessions %s",
                wait_seconds,
                [r["pid"] for r in ended if r["ended"]],
                extra={"action": "epoch-wait"},
            )
            continue
        if row is None:
            raise Resharding(
                "the shard is being resharded and the reshard has not finished: run "
                "`tickwork reshard` again to finish it"
            )
        return Holder(row["epoch"], row["owner"], row["acquired_at"])
    raise AssertionError("unreachable")
