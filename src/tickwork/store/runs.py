"""Runs: enqueue (now, at an instant, after a delay; idempotent), read, list, cancel."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg
import orjson

from tickwork import shards
from tickwork.errors import InvalidState, NotFound
from tickwork.store import queries
from tickwork.store.database import Connection

INSERT_RUN: Final = queries.get("insert_run")
RUN_BY_KEY: Final = queries.get("run_by_key")
RUN_BY_ID: Final = queries.get("run_by_id")
RUNS_OF_JOB: Final = queries.get("runs_of_job")
ATTEMPTS_OF_RUN: Final = queries.get("attempts_of_run")
LOCK_RUN: Final = queries.get("lock_run")
CANCEL_PENDING: Final = queries.get("cancel_pending")
REQUEST_CANCEL: Final = queries.get("request_cancel")
CANCEL_RUNS_OF_JOB: Final = queries.get("cancel_runs_of_job")
JOB_RUN_COUNTS: Final = queries.get("job_run_counts")
LAST_FINISHED_RUN: Final = queries.get("last_finished_run")
RECORD_AUDIT: Final = queries.get("record_audit")
AUDIT_OF_JOB: Final = queries.get("audit_of_job")
NOTIFY_READY: Final = queries.get("notify_ready")


class State(enum.StrEnum):
    scheduled = "scheduled"
    ready = "ready"
    leased = "leased"
    retry_wait = "retry_wait"
    succeeded = "succeeded"
    dead = "dead"
    cancelled = "cancelled"
    discarded = "discarded"
    skipped = "skipped"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: Final = frozenset(
    {State.succeeded, State.dead, State.cancelled, State.discarded, State.skipped}
)
PENDING: Final = frozenset({State.scheduled, State.ready, State.retry_wait})


class Origin(enum.StrEnum):
    cron = "cron"  # materialised from a schedule
    once = "once"  # a one-off job's runAt
    api = "api"  # enqueued through the API


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    fencing_token: int
    worker_id: str | None
    leased_at: datetime
    finished_at: datetime | None
    outcome: str | None
    error: Any


@dataclass(frozen=True, slots=True)
class Run:
    shard: int
    id: int
    tenant: str
    job: str
    queue: str
    priority: int
    state: State
    origin: Origin
    attempt: int
    max_attempts: int
    due_at: datetime
    ready_at: datetime
    idempotency_key: str | None
    payload_json: str | None
    fencing_token: int | None
    lease_owner: str | None
    leased_at: datetime | None
    lease_expires_at: datetime | None
    deadline: datetime | None
    cancel_requested: bool
    last_error: Any
    created_at: datetime
    finished_at: datetime | None

    @property
    def run_id(self) -> str:
        return shards.format_run_id(self.shard, self.id)

    @property
    def effective_idempotency_key(self) -> str:
        """The key handlers use: the stored one, or ``tenant/name#runId`` without one."""
        return self.idempotency_key or f"{self.tenant}/{self.job}#{self.run_id}"

    @property
    def payload(self) -> Any:
        return None if self.payload_json is None else orjson.loads(self.payload_json)

    @classmethod
    def from_record(cls, shard: int, row: asyncpg.Record) -> Run:
        return cls(
            shard=shard,
            id=row["id"],
            tenant=row["tenant"],
            job=row["job"],
            queue=row["queue"],
            priority=row["priority"],
            state=State(row["state"]),
            origin=Origin(row["origin"]),
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            due_at=row["due_at"],
            ready_at=row["ready_at"],
            idempotency_key=row["idempotency_key"],
            payload_json=row["payload"],
            fencing_token=row["fencing_token"],
            lease_owner=row["lease_owner"],
            leased_at=row["leased_at"],
            lease_expires_at=row["lease_expires_at"],
            deadline=row["deadline"],
            cancel_requested=row["cancel_requested"],
            last_error=_json(row["last_error"]),
            created_at=row["created_at"],
            finished_at=row["finished_at"],
        )


@dataclass(frozen=True, slots=True)
class NewRun:
    """What to insert. ``ready_at``/``due_at`` default to now (the database clock)."""

    tenant: str
    job: str
    queue: str
    priority: int
    origin: Origin
    max_attempts: int
    retry_base: float
    retry_max: float
    timeout_seconds: int
    due_at: datetime | None = None
    ready_at: datetime | None = None
    start_deadline: datetime | None = None
    idempotency_key: str | None = None
    payload_json: str | None = None
    concurrency: int = 0  # the job's limit of leased runs; 0: none


def _json(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


async def insert(
    conn: Connection, shard: int, new: NewRun, now: datetime | None = None
) -> tuple[Run, bool]:
    """Insert a run; with an idempotency key already used, return the first run instead.

    Returns ``(run, created)``. A run that is ready at once wakes long-polling workers
    when the surrounding transaction commits.
    """
    row = await conn.fetchrow(
        INSERT_RUN,
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
    )
    if row is None:
        existing = await conn.fetchrow(RUN_BY_KEY, new.tenant, new.job, new.idempotency_key)
        if existing is None:  # pragma: no cover - the conflicting row committed first
            raise RuntimeError("idempotency conflict without a visible row")
        return Run.from_record(shard, existing), False
    run = Run.from_record(shard, row)
    if run.state is State.ready:
        await notify_ready(conn, [run.queue])
    return run, True


async def notify_ready(conn: Connection, queues: list[str]) -> None:
    if queues:
        await conn.execute(NOTIFY_READY, queues)


async def get(conn: Connection, shard: int, run_id: int) -> Run:
    row = await conn.fetchrow(RUN_BY_ID, run_id)
    if row is None:
        raise NotFound(f"no run {shards.format_run_id(shard, run_id)!r}", field="runId")
    return Run.from_record(shard, row)


async def attempts(conn: Connection, run: Run) -> list[Attempt]:
    """The run's finished attempts, then the attempt in flight if it is leased."""
    rows = await conn.fetch(ATTEMPTS_OF_RUN, run.id)
    history = [
        Attempt(
            attempt=row["attempt"],
            fencing_token=row["fencing_token"],
            worker_id=row["worker_id"],
            leased_at=row["leased_at"],
            finished_at=row["finished_at"],
            outcome=row["outcome"],
            error=_json(row["error"]),
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
        RUNS_OF_JOB, tenant, job, before_id, state.value if state else None, limit
    )
    return [Run.from_record(shard, row) for row in rows]


async def cancel(
    conn: Connection, shard: int, run_id: int, actor: str, now: datetime | None = None
) -> Run:
    """Cancel a run: pending → cancelled; leased → ``cancelRequested``.

    Cancelling a cancelled run answers it unchanged; other finished runs are refused.
    """
    async with conn.transaction():
        current = await conn.fetchrow(LOCK_RUN, run_id)
        if current is None:
            raise NotFound(f"no run {shards.format_run_id(shard, run_id)!r}", field="runId")
        state = State(current["state"])
        if state in PENDING:
            row = await conn.fetchrow(CANCEL_PENDING, run_id, now)
        elif state is State.leased:
            row = await conn.fetchrow(REQUEST_CANCEL, run_id, now)
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
    rows = await conn.fetch(CANCEL_RUNS_OF_JOB, tenant, job, now)
    requested = sum(1 for row in rows if row["state"] == State.leased.value)
    return len(rows) - requested, requested


@dataclass(frozen=True, slots=True)
class JobRunSummary:
    active: int
    dead: int
    last_run: Run | None
    next_scheduled: datetime | None = None


async def summary_of_job(conn: Connection, shard: int, tenant: str, job: str) -> JobRunSummary:
    counts = await conn.fetchrow(JOB_RUN_COUNTS, tenant, job)
    assert counts is not None
    last = await conn.fetchrow(LAST_FINISHED_RUN, tenant, job)
    last_run = Run.from_record(shard, last) if last is not None else None
    return JobRunSummary(
        active=counts["active"],
        dead=counts["dead"],
        last_run=last_run,
        next_scheduled=counts["next_scheduled"],
    )


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
        RECORD_AUDIT,
        tenant,
        job,
        run_id,
        action,
        actor,
        None if detail is None else orjson.dumps(detail).decode(),
        now,
    )


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: datetime
    run_id: int | None
    action: str
    actor: str
    detail: Any


async def audit_of_job(
    conn: Connection, tenant: str, job: str, limit: int = 100
) -> list[AuditEntry]:
    rows = await conn.fetch(AUDIT_OF_JOB, tenant, job, limit)
    return [
        AuditEntry(row["at"], row["run_id"], row["action"], row["actor"], _json(row["detail"]))
        for row in rows
    ]
