"""The sliding windows of queue-wide rate limits (``--queue-rate-limit``), on each
limited queue's home shard: a dispatcher takes leases from a queue's window before it
claims runs of the queue, and gives back the ones it did not use. Each is one short
transaction; the window never lets more than its limit through in any period, whatever
the number of dispatchers (see docs/flow-control.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    lock_queue_window: str
    take_queue_window: str
    give_back_queue_window: str


# The tenant of queue windows in rate_windows: none (a queue's limit spans tenants).
TENANT: Final = ""


def window_key(queue: str) -> str:
    """The window's key in rate_windows, and the name its home shard is placed by."""
    return f"queue/{queue}"


@dataclass(frozen=True, slots=True)
class Taken:
    """Leases taken from a queue's window: ``granted`` of the ``wanted``, recorded in
    ``slot``."""

    queue: str
    wanted: int
    granted: int
    slot: datetime


async def take(
    conn: Connection,
    queue: str,
    limit: int,
    period_seconds: float,
    wanted: int,
    now: datetime | None = None,
) -> Taken:
    """Up to ``wanted`` leases of ``queue`` from its window (``limit`` per
    ``period_seconds``), recorded as used until given back."""
    key = window_key(queue)
    async with conn.transaction():
        await conn.execute(SQL.lock_queue_window, key)
        row = await conn.fetchrow(SQL.take_queue_window, key, limit, period_seconds, wanted, now)
    assert row is not None
    return Taken(queue, wanted, row["granted"], row["slot"])


async def give_back(conn: Connection, taken: Taken, unused: int) -> None:
    """``unused`` of the leases ``taken`` no longer count in the window."""
    if unused > 0:
        await conn.execute(SQL.give_back_queue_window, window_key(taken.queue), taken.slot, unused)
