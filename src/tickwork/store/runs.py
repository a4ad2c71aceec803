"""Runs: enqueue (now, at an instant, after a delay; idempotent), read, list, cancel."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from tickwork.core import shards
from tickwork.core.errors import InvalidState, NotFound
from tickwork.core.records import (
    PENDING,
    UNRESTRICTED,
    Attempt,
    JobRunSummary,
    NewRun,
    ReadyRuns,
    Row,
    Run,
    Scope,
    State,
    decode_json,
)
from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    insert_run: str
    run_by_key: str
    new_run_ids: str
    insert_runs: str
    run_by_id: str
    runs_of_job: str
    attempts_of_run: str
    lock_run: str
    finished_run: str
    run_summaries: str
    finished_runs_by_id: str
    cancel_pending: str
    request_cancel: str
    cancel_runs_of_job: str
    job_run_counts: str
    last_finished_run: str
    record_audit: str
    notify_ready: str
    set_dry_run: str
    insert_ready_runs: str
    enqueue_run: str


async def insert(
    conn: Connection,
    shard: int,
    new: NewRun,
    now: datetime | None = None,
    actor: str | None = None,
) -> tuple[Run, bool]:
    """Insert a run; with an idempotency key already used, return the first run instead.

    Returns ``(run, created)``. A run that is ready at once wakes long-polling workers
    when the surrounding transaction commits. With ``actor``, a new run's enqueue is
    recorded in the audit log (in the same statement).
    """
    row = await conn.fetchrow(
        SQL.insert_run,
        new.tenant,
        new.job,
        new.queue,
        new.priority,
        new.origin.value,
        new.max_attempts,
        new.retry_base,
        new.retry_max,
        new.timeout_seconds,
        new.due_at,
        new.ready_at,
        new.start_deadline,
        new.idempotency_key,
        new.payload_json,
        now,
        new.concurrency,
        new.request_fingerprint,
        new.dry_run,
        actor,
    )
    if row is None:
        existing = await conn.fetchrow(SQL.run_by_key, new.tenant, new.job, new.idempotency_key)
        if existing is None:  # pragma: no cover - the conflicting row committed first
            raise RuntimeError("idempotency conflict without a visible row")
        return Run.from_record(shard, existing), False
    return Run.from_record(shard, row), True


async def set_dry_run(conn: Connection, tenant: str, job: str, dry_run: bool) -> None:
    """Put the job's runs not leased yet in (or out of) dry-run mode."""
    await conn.execute(SQL.set_dry_run, tenant, job, dry_run)


async def by_key(
    conn: Connection, shard: int, tenant: str, job: str, idempotency_key: str
) -> Run | None:
    """The run of ``tenant/job`` enqueued with ``idempotency_key``, if any."""
    row = await conn.fetchrow(SQL.run_by_key, tenant, job, idempotency_key)
    return None if row is None else Run.from_record(shard, row)


async def insert_many(
    conn: Connection, shard: int, news: list[NewRun], now: datetime | None = None
) -> list[tuple[Run, bool]]:
    """``insert`` for many runs, in two statements whatever their number (ids first, so
    each inserted row is matched to its request); one ``(run, created)`` per request."""
    if not news:
        return []
    ids = [row["id"] for row in await conn.fetch(SQL.new_run_ids, len(news))]
    rows = await conn.fetch(
        SQL.insert_runs,
        ids,
        [n.tenant for n in news],
        [n.job for n in news],
        [n.queue for n in news],
        [n.priority for n in news],
        [n.origin.value for n in news],
        [n.max_attempts for n in news],
        [n.retry_base for n in news],
        [n.retry_max for n in news],
        [n.timeout_seconds for n in news],
        [n.due_at for n in news],
        [n.ready_at for n in news],
        [n.idempotency_key for n in news],
        [n.payload_json for n in news],
        now,
        [n.concurrency for n in news],
        [n.request_fingerprint for n in news],
        # One job's runs: one mode for the whole batch.
        any(n.dry_run for n in news),
    )
    inserted = {row["id"]: Run.from_record(shard, row) for row in rows}
    results: list[tuple[Run, bool]] = []
    for run_id, new in zip(ids, news, strict=True):
        run = inserted.get(run_id)
        if run is not None:
            results.append((run, True))
            continue
        existing = await conn.fetchrow(SQL.run_by_key, new.tenant, new.job, new.idempotency_key)
        if existing is None:  # pragma: no cover - the conflicting row committed first
            raise RuntimeError("idempotency conflict without a visible row")
        results.append((Run.from_record(shard, existing), False))
    await notify_ready(
        conn, sorted({run.queue for run in inserted.values() if run.state is State.ready})
    )
    return results


async def insert_ready(
    conn: Connection,
    shard: int,
    tenant: str,
    job: str,
    payloads_json: list[bytes | None],
    actor: str,
    now: datetime | None = None,
) -> ReadyRuns | None:
    """Runs of the job, ready now, one per payload (JSON text, ``null`` for none; None:
    the job's payload), in one statement (one round trip, no transaction around it)
    that reads the definition, records one audit entry and wakes long-polling workers
    at its commit. None when the job does not exist."""
    # One JSON array for all: one parameter to encode and to send, however many runs.
    array = b"[" + b",".join(b"null" if p is None else p for p in payloads_json) + b"]"
    job_payload_at = [n for n, p in enumerate(payloads_json, 1) if p is None]
    row = await conn.fetchrow(
        SQL.insert_ready_runs, tenant, job, array.decode(), job_payload_at, now, actor
    )
    if row is None:
        return None
    default = None if row["payload"] is None else row["payload"].encode()
    return ReadyRuns(
        shard=shard,
        tenant=tenant,
        job=job,
        queue=row["queue"],
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        created_at=row["now"],
        ids=list(row["ids"]),
        payloads_json=[
            default if p is None else (None if p == b"null" else p) for p in payloads_json
        ],
    )


async def enqueue(
    conn: Connection,
    shard: int,
    tenant: str,
    job: str,
    *,
    run_at: datetime | None,
    delay_seconds: float | None,
    payload_json: str | None,
    payload_given: bool,
    priority: int | None,
    idempotency_key: str | None,
    request_fingerprint: bytes | None,
    actor: str,
    now: datetime | None = None,
) -> Run | None:
    """One run of the job (``enqueue_run``): in one statement, definition read, key
    claimed, audit entry and wake-up included. None when nothing was inserted: the job
    does not exist or the idempotency key is taken."""
    row = await conn.fetchrow(
        SQL.enqueue_run,
        tenant,
        job,
        run_at,
        delay_seconds,
        payload_json,
        payload_given,
        priority,
        idempotency_key,
        request_fingerprint,
        now,
        actor,
    )
    return None if row is None else Run.from_record(shard, row)


async def notify_ready(conn: Connection, queues: list[str]) -> None:
    if queues:
        await conn.execute(SQL.notify_ready, queues)


def _absent(shard: int, run_id: int) -> NotFound:
    return NotFound(f"no run {shards.format_run_id(shard, run_id)!r}", field="runId")


def _visible(row: Row | None, scope: Scope) -> bool:
    # A run outside the caller's tenant or queues is reported as absent: existence of
    # another team's runs is not the caller's business.
    return row is not None and scope.allows(row["tenant"], row["queue"])


async def get(conn: Connection, shard: int, run_id: int, scope: Scope = UNRESTRICTED) -> Run:
    """The run, if ``scope`` may see it (``NotFound`` otherwise)."""
    row = await conn.fetchrow(SQL.run_by_id, run_id)
    if row is None or not _visible(row, scope):
        raise _absent(shard, run_id)
    return Run.from_record(shard, row)


async def require_visible(
    conn: Connection, shard: int, run_id: int, scope: Scope = UNRESTRICTED
) -> None:
    """``NotFound`` unless the run exists and ``scope`` may see it. A run's tenant and
    queue never change, so the answer holds for the rest of the caller's transaction."""
    if scope == UNRESTRICTED:
        return
    if not _visible(await conn.fetchrow(SQL.run_by_id, run_id), scope):
        raise _absent(shard, run_id)


async def attempts(conn: Connection, run: Run) -> list[Attempt]:
    """The run's finished attempts, then the attempt in flight if it is leased."""
    rows = await conn.fetch(SQL.attempts_of_run, run.id)
    history = [
        Attempt(
            attempt=row["attempt"],
            fencing_token=row["fencing_token"],
            worker_id=row["worker_id"],
            leased_at=row["leased_at"],
            finished_at=row["finished_at"],
            outcome=row["outcome"],
            error=decode_json(row["error"]),
        )
        for row in rows
    ]
    if run.state is State.leased and run.leased_at is not None and run.fencing_token:
        history.append(
            Attempt(
                attempt=run.attempt,
                fencing_token=run.fencing_token,
                worker_id=run.lease_owner,
                leased_at=run.leased_at,
                finished_at=None,
                outcome=None,
                error=None,
            )
        )
    return history


async def list_of_job(
    conn: Connection,
    shard: int,
    tenant: str,
    job: str,
    *,
    state: State | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[Run]:
    """The job's runs, newest first, strictly older than ``before_id`` when given."""
    rows = await conn.fetch(
        SQL.runs_of_job, tenant, job, before_id, state.value if state else None, limit
    )
    return [Run.from_record(shard, row) for row in rows]


async def cancel(
    conn: Connection,
    shard: int,
    run_id: int,
    actor: str,
    now: datetime | None = None,
    scope: Scope = UNRESTRICTED,
) -> Run:
    """Cancel a run ``scope`` may see: pending → cancelled; leased → ``cancelRequested``.

    Cancelling a cancelled run answers it unchanged; other finished runs are refused.
    """
    async with conn.transaction():
        current = await conn.fetchrow(SQL.lock_run, run_id)
        if current is None:
            current = await conn.fetchrow(SQL.finished_run, run_id)
        if current is None or not _visible(current, scope):
            raise _absent(shard, run_id)
        state = State(current["state"])
        if state in PENDING:
            row = await conn.fetchrow(SQL.cancel_pending, run_id, now)
        elif state is State.leased:
            row = await conn.fetchrow(SQL.request_cancel, run_id, now)
        elif state is State.cancelled:
            return Run.from_record(shard, current)
        else:
            raise InvalidState(f"run {shards.format_run_id(shard, run_id)} is {state.value}")
        assert row is not None
        await audit(conn, row["tenant"], row["job"], run_id, "cancel", actor, None, now)
        return Run.from_record(shard, row)


async def cancel_all_of_job(
    conn: Connection, tenant: str, job: str, now: datetime | None = None
) -> tuple[int, int]:
    """Cancel the job's pending runs; ask its leased runs to stop.

    Returns ``(cancelled, cancel_requested)``.
    """
    rows = await conn.fetch(SQL.cancel_runs_of_job, tenant, job, now)
    requested = sum(1 for row in rows if row["state"] == State.leased.value)
    return len(rows) - requested, requested


async def summary_of_job(conn: Connection, shard: int, tenant: str, job: str) -> JobRunSummary:
    counts = await conn.fetchrow(SQL.job_run_counts, tenant, job)
    assert counts is not None
    last = await conn.fetchrow(SQL.last_finished_run, tenant, job)
    last_run = Run.from_record(shard, last) if last is not None else None
    return JobRunSummary(
        active=counts["active"],
        dead=counts["dead"],
        last_run=last_run,
        next_scheduled=counts["next_scheduled"],
    )


async def summaries_of_jobs(
    conn: Connection, shard: int, tenant: str, jobs: list[str]
) -> dict[str, JobRunSummary]:
    """``summary_of_job`` for many jobs of one shard, in one statement and one read."""
    if not jobs:
        return {}
    rows = await conn.fetch(SQL.run_summaries, tenant, jobs)
    last_ids = [row["last_id"] for row in rows if row["last_id"] is not None]
    last = {
        row["id"]: Run.from_record(shard, row)
        for row in (await conn.fetch(SQL.finished_runs_by_id, last_ids) if last_ids else [])
    }
    return {
        row["job"]: JobRunSummary(
            active=row["active"],
            dead=row["dead"],
            last_run=last.get(row["last_id"]),
            next_scheduled=row["next_scheduled"],
        )
        for row in rows
    }


async def audit(
    conn: Connection,
    tenant: str,
    job: str,
    run_id: int | None,
    action: str,
    actor: str,
    detail: dict[str, Any] | None,
    now: datetime | None = None,
) -> None:
    """Record who did what (definition changes, cancels, DLQ replays and discards)."""
    await conn.execute(
        SQL.record_audit,
        tenant,
        job,
        run_id,
        action,
        actor,
        None if detail is None else orjson.dumps(detail).decode(),
        now,
    )
