"""Paused queues in one shard (``queues.sql``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    pause_queue: str
    resume_queue: str
    paused_queues_of_tenant: str
    queues_of_tenant: str
    paused_queues: str


@dataclass(frozen=True, slots=True)
class Pause:
    queue: str
    paused_at: datetime
    actor: str


async def pause(
    conn: Connection, tenant: str, queue: str, actor: str, now: datetime | None = None
) -> tuple[Pause, bool]:
    """Pause ``queue`` of ``tenant`` in this shard; the pause in force, and whether this
    call made it."""
    row = await conn.fetchrow(SQL.pause_queue, tenant, queue, actor, now)
    assert row is not None
    return Pause(queue, row["paused_at"], row["actor"]), bool(row["paused"])


async def resume(conn: Connection, tenant: str, queue: str) -> bool:
    """Whether the queue was paused in this shard (it is not now)."""
    return await conn.fetchrow(SQL.resume_queue, tenant, queue) is not None


async def paused_of_tenant(conn: Connection, tenant: str) -> list[Pause]:
    rows = await conn.fetch(SQL.paused_queues_of_tenant, tenant)
    return [Pause(row["queue"], row["paused_at"], row["actor"]) for row in rows]


async def job_counts(conn: Connection, tenant: str) -> dict[str, int]:
    return {row["queue"]: row["jobs"] for row in await conn.fetch(SQL.queues_of_tenant, tenant)}


async def all_paused(conn: Connection) -> set[tuple[str, str]]:
    return {(row["tenant"], row["queue"]) for row in await conn.fetch(SQL.paused_queues)}
