"""The audit log across shards: who changed what, newest first.

Every change to a job or run (create, update, delete, pause, resume, enqueue, cancel,
DLQ replay and discard) is recorded with its actor in the shard that holds the job, in
the transaction of the change. A tenant's log is the merge of its shards' logs in
``(at, shard, id)`` order, with the same kind of cursor as the DLQ.
"""

from __future__ import annotations

import heapq
from datetime import datetime

from tickwork.core.records import AuditEntry
from tickwork.engine.cursors import Position
from tickwork.store import audit
from tickwork.store.database import Database


async def entries(
    database: Database, tenant: str, job: str | None, cursor: Position | None, limit: int
) -> tuple[list[AuditEntry], Position | None]:
    """One page of the tenant's log (or one job's: only its shard is read) and the
    cursor of the next page (None on the last)."""
    numbers = (
        range(database.shard_count) if job is None else [database.shard_map.shard_of(tenant, job)]
    )
    per_shard: list[list[AuditEntry]] = []
    for shard in numbers:
        before = None if cursor is None else cursor.bound_for(shard)
        async with database.connection(shard) as conn:
            per_shard.append(await audit.page(conn, shard, tenant, job, before, limit + 1))
    merged = list(heapq.merge(*per_shard, key=_order, reverse=True))
    page = merged[:limit]
    if len(merged) > limit and page:
        last = page[-1]
        return page, Position(last.at, last.shard, last.id)
    return page, None


async def notifications(database: Database, tenant: str, limit: int) -> list[AuditEntry]:
    """The tenant's ``limit`` newest delivered notifications, from every shard (each is
    written on the shard of the run it is about)."""
    per_shard: list[list[AuditEntry]] = []
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            per_shard.append(await audit.notifications(conn, shard, tenant, limit))
    return list(heapq.merge(*per_shard, key=_order, reverse=True))[:limit]


def _order(entry: AuditEntry) -> tuple[datetime, int, int]:
    return (entry.at, entry.shard, entry.id)
