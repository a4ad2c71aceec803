"""A tenant's notification targets in one shard, and delivered notifications' audit
entries (``notifications.sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import orjson

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    clear_default_notification_target: str
    put_notification_target: str
    notification_target: str
    notification_targets_of_tenant: str
    delete_notification_target: str
    all_notification_targets: str
    copy_notification_target: str
    record_delivery: str
    watched_runs: str
    enqueue_notifications: str


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str
    format: str  # json or slack
    secret_ref: dict[str, str] | None  # {"env": NAME} or {"file": PATH}: never the key
    default: bool
    updated_at: datetime
    actor: str


def _target(row: asyncpg.Record) -> Target:
    secret = row["secret_ref"]
    return Target(
        row["name"],
        row["url"],
        row["format"],
        None if secret is None else orjson.loads(secret),
        row["is_default"],
        row["updated_at"],
        row["actor"],
    )


async def put(
    conn: Connection,
    tenant: str,
    target: Target,
    now: datetime | None = None,
) -> Target:
    secret = None if target.secret_ref is None else orjson.dumps(target.secret_ref).decode()
    async with conn.transaction():
        if target.default:
            await conn.execute(SQL.clear_default_notification_target, tenant, target.name)
        row = await conn.fetchrow(
            SQL.put_notification_target,
            tenant,
            target.name,
            target.url,
            target.format,
            secret,
            target.default,
            target.actor,
            now,
        )
    assert row is not None
    return _target(row)


async def get(conn: Connection, tenant: str, name: str) -> Target | None:
    row = await conn.fetchrow(SQL.notification_target, tenant, name)
    return None if row is None else _target(row)


async def of_tenant(conn: Connection, tenant: str) -> list[Target]:
    return [_target(row) for row in await conn.fetch(SQL.notification_targets_of_tenant, tenant)]


async def delete(conn: Connection, tenant: str, name: str) -> bool:
    """Whether this shard held the target (it does not now)."""
    return await conn.fetchrow(SQL.delete_notification_target, tenant, name) is not None


async def copy_all(source: Connection, target: Connection) -> int:
    """Give ``target`` (a new shard) every notification target ``source`` holds."""
    rows = await source.fetch(SQL.all_notification_targets)
    await target.executemany(SQL.copy_notification_target, [tuple(row.values()) for row in rows])
    return len(rows)


async def record_delivery(
    conn: Connection,
    tenant: str,
    job: str,
    delivery_run_id: int,
    detail: dict[str, Any],
    now: datetime | None = None,
) -> None:
    await conn.execute(
        SQL.record_delivery, tenant, job, delivery_run_id, orjson.dumps(detail).decode(), now
    )


@dataclass(frozen=True, slots=True)
class Watched:
    """A run of a job that watches its deadline or its leases, perhaps overdue."""

    event: str  # deadlineMissed or leasedTooLong
    tenant: str
    job: str
    target: str
    notify: dict[str, Any]
    schedule_zone: str | None
    run_id: str  # public: r<shard>-<id>
    state: str
    due_at: datetime
    attempt: int
    leased_at: datetime | None
    worker_id: str | None


async def watched_runs(
    conn: Connection, now: datetime, lookback_seconds: float, limit: int
) -> list[Watched]:
    rows = await conn.fetch(SQL.watched_runs, now, lookback_seconds, limit)
    return [
        Watched(
            row["event"],
            row["tenant"],
            row["job"],
            row["target"],
            orjson.loads(row["notify"]),
            row["schedule_zone"],
            row["run_id"],
            row["state"],
            row["due_at"],
            row["attempt"],
            row["leased_at"],
            row["lease_owner"],
        )
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class Notice:
    """A notification to make: its tenant, its key and the body it carries."""

    tenant: str
    key: str
    body: dict[str, Any]


async def enqueue(conn: Connection, notices: Sequence[Notice], now: datetime) -> int:
    """Make the deliveries of ``notices`` whose keys are new; how many were made."""
    if not notices:
        return 0
    made = await conn.fetchval(
        SQL.enqueue_notifications,
        [n.tenant for n in notices],
        [n.key for n in notices],
        [orjson.dumps(n.body).decode() for n in notices],
        now,
    )
    return int(made)
