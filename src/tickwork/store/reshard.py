"""The storage side of doubling the shard count (``engine.reshard``): walking a
shard's jobs, moving one job (its rows copied to the new shard, then forgotten on the
source with a forwarding row per run), the reshard journal, and the run-id forwarding
lookup.

The engine decides the steps and their order (what moves where, when a shard is
prepared or done); each step's transaction is here, with its statements, so the
engine holds no transaction of its own and runs no SQL.

Rows travel as binary COPY (every value exactly as stored: jsonb, bytea, timestamps,
floats), one table at a time, over a fixed list of tables: everything a shard keeps
per job. What a shard keeps for itself (its identity, epoch, lease, members, schema
version, journal, forwarding rows) stays where it is.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import asyncpg

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    reshard_next_job: str
    reshard_job_size: str
    reshard_lock_job: str
    reshard_lock_job_runs: str
    reshard_clear_job: str
    reshard_mark_changed: str
    reshard_forget_job: str
    reshard_tenant_buckets: str
    reshard_put_bucket: str
    reshard_paused_queues: str
    reshard_put_paused_queue: str
    reshard_forget_bucket: str
    reshard_next_ids: str
    reshard_raise_ids: str
    reshard_journal: str
    reshard_begin: str
    reshard_count_moved: str
    reshard_finish: str
    reshard_set_shard_count: str
    reshard_in_progress: str
    moved_run_shards: str
    reshard_other_sessions: str
    shard_identity: str


# Every table that holds rows of a job, in the order they are copied, with the query
# that selects one job's rows. The names are this fixed list, never input.
JOB_TABLES: Final = (
    ("definitions", queries.get("reshard_copy_definitions")),
    ("live_runs", queries.get("reshard_copy_live_runs")),
    ("finished_runs", queries.get("reshard_copy_finished_runs")),
    ("attempts", queries.get("reshard_copy_attempts")),
    ("run_keys", queries.get("reshard_copy_run_keys")),
    ("enqueue_keys", queries.get("reshard_copy_enqueue_keys")),
    ("audit_log", queries.get("reshard_copy_audit_log")),
)

# The job's change mark is not copied but made anew on the new shard (its status names
# the shard, which changed); the tenant's enqueue bucket moves by tenant.
JOB_MARKS: Final = ("changed_jobs",)
TENANT_TABLES: Final = ("enqueue_buckets",)
# Copied whole to each new shard: every shard holds all of it.
REPLICATED_TABLES: Final = ("notification_targets", "queue_pauses")
# What each shard keeps for itself: never moved. A moved job's or queue's rate window
# (rate_windows) starts afresh where it lands: at most one period's leases more, once.
# A bulk operation's part (operations) acts on the runs its shard held when it began.
SHARD_TABLES: Final = (
    "moved_runs",
    "operations",
    "rate_windows",
    "reshard_journal",
    "scheduler_members",
    "schema_version",
    "shard_epoch",
    "shard_lease",
    "shard_meta",
)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    from_count: int
    to_count: int
    role: str  # 'source' (the shard split) or 'target' (a new shard)
    phase: str  # 'moving' or 'done'
    moved_jobs: int
    moved_runs: int
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class JobSize:
    definitions: int
    live_runs: int
    finished_runs: int

    @property
    def runs(self) -> int:
        return self.live_runs + self.finished_runs


@dataclass(frozen=True, slots=True)
class Ids:
    """The next value of each sequence of a shard."""

    run_ids: int
    fencing_tokens: int
    audit_ids: int


@dataclass(frozen=True, slots=True)
class Session:
    pid: int
    application_name: str
    client: str | None
    started_at: datetime


@dataclass(frozen=True, slots=True)
class Bucket:
    tenant: str
    tokens: float
    at: datetime
    admitted: bool


async def identity(conn: Connection) -> tuple[int, int] | None:
    """``(shard, shard_count)`` the shard says it is; None on a shard never migrated."""
    try:
        row = await conn.fetchrow(SQL.shard_identity)
    except asyncpg.UndefinedTableError:
        return None
    return None if row is None else (row["shard"], row["shard_count"])


async def journal(conn: Connection) -> list[JournalEntry]:
    return [JournalEntry(**dict(row)) for row in await conn.fetch(SQL.reshard_journal)]


async def in_progress(conn: Connection) -> tuple[int, int] | None:
    """``(from, to)`` of a reshard this shard takes part in that has not finished."""
    row = await conn.fetchrow(SQL.reshard_in_progress)
    return None if row is None else (row["from_count"], row["to_count"])


async def prepare_target(
    conn: Connection, at_least: Ids, from_count: int, to_count: int, now: datetime | None
) -> Ids:
    """On a new shard (migrated), in one transaction: its sequences raised to hand out
    values at or above ``at_least``'s (its source's next ones, so a moved run's number
    and fencing token stay unique), and the reshard recorded in its journal as a target.
    Returns where the sequences stand."""
    async with conn.transaction():
        raised = await _raise_ids(conn, at_least)
        await _begin(conn, from_count, to_count, "target", now)
    return raised


async def begin_split(
    conn: Connection, from_count: int, to_count: int, now: datetime | None
) -> None:
    """On a source shard, in one transaction: the reshard recorded in its journal, and
    the shard says it is one of ``to_count``: from then on every role refuses it until
    the reshard is done."""
    async with conn.transaction():
        await _begin(conn, from_count, to_count, "source", now)
        await conn.execute(SQL.reshard_set_shard_count, to_count)


async def _begin(
    conn: Connection, from_count: int, to_count: int, role: str, now: datetime | None
) -> None:
    await conn.execute(SQL.reshard_begin, from_count, to_count, role, now)


async def finish(conn: Connection, from_count: int, to_count: int, now: datetime | None) -> None:
    await conn.execute(SQL.reshard_finish, from_count, to_count, now)


async def next_job(conn: Connection, after: tuple[str, str]) -> tuple[str, str] | None:
    """The next ``(tenant, job)`` with rows on this shard after ``after`` (``("", "")``
    for the first)."""
    row = await conn.fetchrow(SQL.reshard_next_job, *after)
    return None if row is None else (row["tenant"], row["job"])


async def job_size(conn: Connection, tenant: str, job: str) -> JobSize:
    row = await conn.fetchrow(SQL.reshard_job_size, tenant, job)
    assert row is not None
    return JobSize(row["definitions"], row["live_runs"], row["finished_runs"])


async def move_job(
    source: Connection,
    target: Connection,
    tenant: str,
    job: str,
    *,
    to_shard: int,
    from_count: int,
    to_count: int,
    now: datetime | None,
    copied: Callable[[], None] | None = None,
) -> JobSize:
    """Move one job from ``source`` to ``target`` (shard ``to_shard``) in the reshard
    from ``from_count`` to ``to_count`` shards; returns what it held.

    One source transaction (repeatable read) holds the job's definition and live runs
    throughout: its rows are copied in the target's own transaction, which commits
    first, then forgotten on the source, each run leaving a forwarding row, and the move
    counted in the source's journal. Cut short after the copy (``copied`` runs there),
    the job is on both shards until a repeat copies it again and forgets it."""
    async with source.transaction(isolation="repeatable_read"):
        await _lock_job(source, tenant, job)
        size = await job_size(source, tenant, job)
        async with target.transaction():
            await _copy_job(source, target, tenant, job)
        if copied is not None:
            copied()
        runs: int = await source.fetchval(SQL.reshard_forget_job, tenant, job, to_shard, now)
        await source.execute(SQL.reshard_count_moved, from_count, to_count, runs)
    return size


async def _lock_job(conn: Connection, tenant: str, job: str) -> None:
    """Inside the source's transaction: hold the job's definition and live runs."""
    await conn.execute(SQL.reshard_lock_job, tenant, job)
    await conn.execute(SQL.reshard_lock_job_runs, tenant, job)


async def _copy_job(source: Connection, target: Connection, tenant: str, job: str) -> int:
    """Copy every row of the job from ``source`` to ``target`` (inside the target's
    transaction), replacing what an earlier, interrupted copy left there. Returns the
    rows copied."""
    await target.execute(SQL.reshard_clear_job, tenant, job)
    copied = 0
    for table, query in JOB_TABLES:
        buffer = io.BytesIO()
        status = await source.copy_from_query(query, tenant, job, output=buffer, format="binary")
        rows = _copied(status)
        if rows:
            buffer.seek(0)
            await target.copy_to_table(table, source=buffer, format="binary")
            copied += rows
    await target.execute(SQL.reshard_mark_changed, tenant, job)
    return copied


async def buckets(conn: Connection) -> list[Bucket]:
    return [Bucket(**dict(row)) for row in await conn.fetch(SQL.reshard_tenant_buckets)]


async def put_bucket(conn: Connection, bucket: Bucket) -> None:
    await conn.execute(
        SQL.reshard_put_bucket, bucket.tenant, bucket.tokens, bucket.at, bucket.admitted
    )


async def forget_bucket(conn: Connection, tenant: str) -> None:
    await conn.execute(SQL.reshard_forget_bucket, tenant)


async def copy_paused_queues(source: Connection, target: Connection) -> int:
    """Give ``target`` (a new shard) every paused queue ``source`` holds."""
    rows = await source.fetch(SQL.reshard_paused_queues)
    await target.executemany(
        SQL.reshard_put_paused_queue,
        [(row["tenant"], row["queue"], row["paused_at"], row["actor"]) for row in rows],
    )
    return len(rows)


async def next_ids(conn: Connection) -> Ids:
    row = await conn.fetchrow(SQL.reshard_next_ids)
    assert row is not None
    return Ids(row["run_ids"], row["fencing_tokens"], row["audit_ids"])


async def _raise_ids(conn: Connection, at_least: Ids) -> Ids:
    """Make the shard's sequences hand out values at or above ``at_least``'s."""
    row = await conn.fetchrow(
        SQL.reshard_raise_ids, at_least.run_ids, at_least.fencing_tokens, at_least.audit_ids
    )
    assert row is not None
    return Ids(row["run_ids"], row["fencing_tokens"], row["audit_ids"])


async def forwarded(conn: Connection, run_ids: list[int]) -> dict[int, int]:
    """The shard each of ``run_ids`` moved to, for those that left this shard."""
    if not run_ids:
        return {}
    rows = await conn.fetch(SQL.moved_run_shards, run_ids)
    return {row["run_id"]: row["shard"] for row in rows}


async def other_sessions(conn: Connection, application_names: list[str]) -> list[Session]:
    """Other sessions named ``application_names`` on this database (the server shows
    every session's name, even other users')."""
    rows = await conn.fetch(SQL.reshard_other_sessions, application_names)
    return [
        Session(row["pid"], row["application_name"], row["client"], row["backend_start"])
        for row in rows
    ]


def _copied(status: str) -> int:
    # "COPY <rows>"
    return int(status.rsplit(" ", 1)[-1])
