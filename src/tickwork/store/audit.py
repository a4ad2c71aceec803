"""Reading the audit log of one shard (entries are written by ``runs.audit`` in the
transaction of the change they record)."""

from __future__ import annotations

from datetime import datetime

from tickwork.core.records import AuditEntry
from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    audit_of_tenant: str
    audit_of_job: str
    audit_notifications: str


async def page(
    conn: Connection,
    shard: int,
    tenant: str,
    job: str | None,
    before: tuple[datetime, int] | None,
    limit: int,
) -> list[AuditEntry]:
    """Entries of ``tenant`` (optionally one job), newest first, strictly before the
    ``(at, id)`` bound."""
    at, entry_id = before if before is not None else (None, None)
    if job is None:
        rows = await conn.fetch(SQL.audit_of_tenant, tenant, at, entry_id, limit)
    else:
        rows = await conn.fetch(SQL.audit_of_job, tenant, job, at, entry_id, limit)
    return [AuditEntry.from_record(shard, row) for row in rows]


async def notifications(conn: Connection, shard: int, tenant: str, limit: int) -> list[AuditEntry]:
    """The tenant's newest delivered notifications (``action: notify``) of this shard."""
    rows = await conn.fetch(SQL.audit_notifications, tenant, limit)
    return [AuditEntry.from_record(shard, row) for row in rows]
