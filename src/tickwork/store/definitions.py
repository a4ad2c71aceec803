"""Job definitions: upsert, get, list, delete, pause and resume."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import orjson

from tickwork.core.errors import NotFound
from tickwork.core.records import Definition, JobStatus, Manager
from tickwork.core.spec import JobSpec
from tickwork.store import changes, queries, runs
from tickwork.store.database import Connection


class SQL(queries.Statements):
    definition: str
    definition_for_update: str
    definition_for_share: str
    upsert_definition: str
    delete_definition: str
    set_paused: str
    definitions_of_tenant: str
    managed_definitions: str
    job_statuses: str


def not_found(tenant: str, name: str) -> NotFound:
    return NotFound(f"no job {name!r} in tenant {tenant!r}", field="name")


async def get(conn: Connection, shard: int, tenant: str, name: str) -> Definition:
    row = await conn.fetchrow(SQL.definition, tenant, name)
    if row is None:
        raise not_found(tenant, name)
    return Definition.from_record(shard, row)


async def lock(
    conn: Connection, shard: int, tenant: str, name: str, *, exclusive: bool
) -> Definition | None:
    """Read and lock a definition inside the caller's transaction (None if absent)."""
    row = await conn.fetchrow(
        SQL.definition_for_update if exclusive else SQL.definition_for_share, tenant, name
    )
    return None if row is None else Definition.from_record(shard, row)


async def upsert(
    conn: Connection,
    shard: int,
    tenant: str,
    name: str,
    spec: JobSpec,
    next_due_at: datetime | None,
    actor: str,
    now: datetime | None = None,
    managed_by: Manager | None = None,
) -> tuple[Definition, bool]:
    """Create or replace a definition; returns ``(definition, created)``.

    The caller computes ``next_due_at`` (it knows whether the schedule changed) and
    decides who may replace whom (``managed_by``: where the definition is declared).
    """
    document = spec.to_stored()
    row = await conn.fetchrow(
        SQL.upsert_definition,
        tenant,
        name,
        orjson.dumps(document).decode(),
        spec.queue,
        spec.priority.rank,
        spec.paused,
        next_due_at,
        now,
        None if managed_by is None else managed_by.value,
    )
    assert row is not None
    await changes.mark(conn, [(tenant, name)])
    created: bool = row["inserted"]
    await runs.audit(
        conn,
        tenant,
        name,
        None,
        "create" if created else "update",
        actor,
        {"generation": row["generation"]},
        now,
    )
    return Definition.from_record(shard, row), created


async def delete(
    conn: Connection, tenant: str, name: str, actor: str, now: datetime | None = None
) -> tuple[int, int]:
    """Delete a definition, cancel its pending runs and keep their history.

    Returns ``(cancelled, cancel_requested)``; ``NotFound`` if there is no such job.
    """
    async with conn.transaction():
        if await conn.fetchrow(SQL.delete_definition, tenant, name) is None:
            raise not_found(tenant, name)
        cancelled, requested = await runs.cancel_all_of_job(conn, tenant, name, now)
        await runs.audit(
            conn,
            tenant,
            name,
            None,
            "delete",
            actor,
            {"cancelled": cancelled, "cancelRequested": requested},
            now,
        )
    return cancelled, requested


async def set_paused(
    conn: Connection,
    shard: int,
    tenant: str,
    name: str,
    paused: bool,
    actor: str,
    now: datetime | None = None,
) -> Definition:
    """Pause or resume (idempotent: pausing a paused job changes and records
    nothing). A paused job materialises no new runs."""
    async with conn.transaction():
        row = await conn.fetchrow(SQL.set_paused, tenant, name, paused, now)
        if row is None:
            raise not_found(tenant, name)
        if row["changed"]:
            await changes.mark(conn, [(tenant, name)])
            await runs.audit(
                conn, tenant, name, None, "pause" if paused else "resume", actor, None, now
            )
    return Definition.from_record(shard, row)


async def list_of_tenant(
    conn: Connection, shard: int, tenant: str, after: str | None, limit: int
) -> list[Definition]:
    rows = await conn.fetch(SQL.definitions_of_tenant, tenant, after, limit)
    return [Definition.from_record(shard, row) for row in rows]


async def managed(
    conn: Connection, manager: Manager, tenants: list[str] | None
) -> list[tuple[str, str]]:
    """``(tenant, name)`` of the definitions ``manager`` keeps, in ``tenants`` (None: all)."""
    rows = await conn.fetch(SQL.managed_definitions, manager.value, tenants)
    return [(row["tenant"], row["name"]) for row in rows]


async def statuses(
    conn: Connection, shard: int, keys: Sequence[tuple[str, str]]
) -> list[JobStatus]:
    """The status of the jobs ``keys`` (``(tenant, name)``) of one shard, in one query."""
    if not keys:
        return []
    rows = await conn.fetch(SQL.job_statuses, [k[0] for k in keys], [k[1] for k in keys])
    return [JobStatus.from_record(shard, row) for row in rows]
