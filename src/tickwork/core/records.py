"""The records tickwork passes between layers: runs, attempts, leases, completions,
definitions, and the scope a caller may touch.

The store builds them from rows; the engine and the adapters (API, operator, CLI)
read them. They hold no behaviour beyond naming what a row means.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeAlias

import orjson

from tickwork.core import containers, shards
from tickwork.core import spec as spec_module
from tickwork.core.hot import hot_record
from tickwork.core.spec import JobSpec

# A database row: asyncpg's Record, or any mapping of column names to values.
Row: TypeAlias = Mapping[str, Any]


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


class _RunIdentity:
    """The public id and the handlers' idempotency key of a run, read from its row's
    shard, id, tenant, job and stored key."""

    __slots__ = ()

    shard: int
    id: int
    tenant: str
    job: str
    idempotency_key: str | None

    @property
    def run_id(self) -> str:
        return shards.format_run_id(self.shard, self.id)

    @property
    def effective_idempotency_key(self) -> str:
        """The key handlers use: the stored one, or ``tenant/name#runId`` without one."""
        return effective_idempotency_key(self.idempotency_key, self.tenant, self.job, self.run_id)


def effective_idempotency_key(stored: str | None, tenant: str, job: str, run_id: str) -> str:
    """A run's key for handlers: ``stored``, or ``tenant/name#runId`` without one."""
    return stored or f"{tenant}/{job}#{run_id}"


@dataclass(frozen=True, slots=True)
class Run(_RunIdentity):
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
    # SHA-256 of the enqueue request that made an ad hoc run with an idempotency key:
    # a second request with the key must be the same request.
    request_fingerprint: bytes | None = None
    # Set on the answer to an enqueue that the job's rule gave an existing run instead
    # of a new one: "unique" (deduplicated) or "debounce" (debounced). Not stored.
    answered_by: str | None = None

    @property
    def payload(self) -> Any:
        return None if self.payload_json is None else orjson.loads(self.payload_json)

    @classmethod
    def from_record(cls, shard: int, row: Row) -> Run:
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
            last_error=decode_json(row["last_error"]),
            created_at=row["created_at"],
            finished_at=row["finished_at"],
            request_fingerprint=row.get("request_fingerprint"),
        )


@dataclass(frozen=True, slots=True)
class ReadyRuns:
    """Runs of one job just enqueued ready, without keys or times of their own (a plain
    batch): what their documents need, without a Run each."""

    shard: int
    tenant: str
    job: str
    queue: str
    priority: int
    max_attempts: int
    created_at: datetime
    ids: list[int]
    # Each run's payload as the JSON text it was stored from (None: none).
    payloads_json: list[bytes | None]


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
    request_fingerprint: bytes | None = None
    dry_run: bool = False  # the job is in dry-run mode (its leases say so)


def decode_json(value: str | None) -> Any:
    """A jsonb column as Python (asyncpg hands jsonb over as text)."""
    return None if value is None else orjson.loads(value)


@dataclass(frozen=True, slots=True)
class JobRunSummary:
    active: int
    dead: int
    last_run: Run | None
    next_scheduled: datetime | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of a shard's audit log: who did what to a job or run, and when."""

    shard: int
    id: int
    at: datetime
    tenant: str
    job: str
    run_id: int | None  # the shard-local id; ``public_run_id`` is the API's
    action: str
    actor: str
    detail: Any

    @property
    def public_run_id(self) -> str | None:
        return None if self.run_id is None else shards.format_run_id(self.shard, self.run_id)

    @classmethod
    def from_record(cls, shard: int, row: Row) -> AuditEntry:
        return cls(
            shard=shard,
            id=row["id"],
            at=row["at"],
            tenant=row["tenant"],
            job=row["job"],
            run_id=row["run_id"],
            action=row["action"],
            actor=row["actor"],
            detail=decode_json(row["detail"]),
        )


@dataclass(frozen=True, slots=True)
class Scope:
    """What a caller may touch: one tenant's runs (None: any) in some queues (None: any)."""

    tenant: str | None = None
    queues: tuple[str, ...] | None = None

    def allows(self, tenant: str, queue: str) -> bool:
        return (self.tenant is None or self.tenant == tenant) and (
            self.queues is None or queue in self.queues
        )

    @property
    def queue_list(self) -> list[str] | None:
        return None if self.queues is None else list(self.queues)


UNRESTRICTED: Final = Scope()


@hot_record
class Lease(_RunIdentity):
    """A run handed to one worker until ``lease_expires_at``."""

    shard: int
    id: int
    tenant: str
    job: str
    queue: str
    priority: int
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    fencing_token: int
    due_at: datetime
    ready_at: datetime
    leased_at: datetime
    lease_expires_at: datetime
    deadline: datetime
    # Passed through as the JSON text the database holds: the worker path never parses it.
    payload_json: str | None
    dry_run: bool = False  # the job is in dry-run mode: the handler must have no effects


class Outcome(enum.StrEnum):
    succeeded = "succeeded"
    failed = "failed"
    # The run waits ``delay_seconds`` and is leased again: no attempt used, no DLQ entry.
    snoozed = "snoozed"


@hot_record
class Completion:
    id: int
    fencing_token: int
    outcome: Outcome
    error: dict[str, Any] | None = None
    retryable: bool = True
    delay_seconds: float = 0.0  # a snooze's wait before the run is ready again


@hot_record
class Completed:
    """The answer to a completion: the state it produced and when a retry may start."""

    id: int
    state: State
    next_attempt_at: datetime | None
    snoozed: bool = False  # the lease ended in a snooze (the run waits in retry_wait)


@hot_record
class Beat:
    id: int
    fencing_token: int
    extend_seconds: float


@hot_record
class Extended:
    id: int
    lease_expires_at: datetime
    cancel_requested: bool


class Manager(enum.StrEnum):
    """Where a definition is declared, when not through the HTTP API. The API refuses to
    change or delete a managed definition: its declaration is the truth."""

    kubernetes = "kubernetes"  # a ScheduledJob object, kept by the operator
    manifests = "manifests"  # a ScheduledJob manifest file, kept by tickwork dev


@dataclass(frozen=True, slots=True)
class PausedReason:
    """Why tickwork paused a job: ``pauseAfterFailures`` consecutive dead runs, the
    last of which is ``run_id`` (shard-local) with ``error``."""

    consecutive_dead: int
    run_id: int
    error: Any
    at: datetime

    @property
    def last_error_message(self) -> str:
        if isinstance(self.error, Mapping) and isinstance(self.error.get("message"), str):
            return str(self.error["message"])
        return "no error recorded"

    def message(self, shard: int) -> str:
        """One line for people: the count, the last dead run and its error."""
        run = shards.format_run_id(shard, self.run_id)
        return (
            f"paused after {self.consecutive_dead} consecutive dead runs "
            f"(pauseAfterFailures); last: run {run}: {self.last_error_message}"
        )

    @classmethod
    def from_json(cls, value: str | None) -> PausedReason | None:
        if value is None:
            return None
        document = orjson.loads(value)
        return cls(
            consecutive_dead=int(document["consecutiveDead"]),
            run_id=int(document["runId"]),
            error=document.get("error"),
            at=datetime.fromisoformat(document["at"]),
        )


@dataclass(frozen=True, slots=True)
class Definition:
    shard: int
    tenant: str
    name: str
    spec: JobSpec
    paused: bool
    next_due_at: datetime | None
    missed_dropped: int
    generation: int
    created_at: datetime
    updated_at: datetime
    managed_by: Manager | None = None
    overlap_skipped: int = 0  # fires overlapPolicy Forbid skipped (cumulative)
    # Runs gone dead since the last succeeded one (or the last resume).
    consecutive_dead: int = 0
    # Why tickwork paused the job (spec.pauseAfterFailures); None when it did not.
    paused_reason: PausedReason | None = None

    @property
    def auto_paused(self) -> bool:
        return self.paused and self.paused_reason is not None

    @classmethod
    def from_record(cls, shard: int, row: Row) -> Definition:
        return cls(
            shard=shard,
            tenant=row["tenant"],
            name=row["name"],
            spec=JobSpec.model_validate(orjson.loads(row["spec"]), context=spec_module.STORED),
            paused=row["paused"],
            next_due_at=row["next_due_at"],
            missed_dropped=row["missed_dropped"],
            generation=row["generation"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            managed_by=None if row["managed_by"] is None else Manager(row["managed_by"]),
            overlap_skipped=row["overlap_skipped"],
            consecutive_dead=row.get("consecutive_dead", 0),
            paused_reason=PausedReason.from_json(row.get("paused_reason")),
        )


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What a job's definition and runs say about it now: the run-derived part of a
    ScheduledJob's status, read in batches."""

    tenant: str
    name: str
    shard: int
    generation: int
    paused: bool
    managed_by: Manager | None
    # Next nominal fire time; None when paused, for API-only jobs and for a runAt job
    # once its run exists.
    next_run_time: datetime | None
    last_schedule_time: datetime | None  # dueAt of the latest run past `scheduled`
    last_run_state: State | None  # and its state
    last_successful_time: datetime | None
    active_runs: int
    dead_runs: int
    missed_runs_dropped: int
    missed_caught_up: int  # missed fire times caught up so far (cumulative)
    overlap_skipped: int = 0  # fires overlapPolicy Forbid skipped (cumulative)
    # A container job's: the Job of the latest run's latest attempt (None: no attempt
    # yet, or not a container job).
    last_job_name: str | None = None
    # Why tickwork paused the job (None: it did not, or it was resumed since).
    paused_reason: PausedReason | None = None

    @classmethod
    def from_record(cls, shard: int, row: Row) -> JobStatus:
        state = row["last_run_state"]
        manager = row["managed_by"]
        return cls(
            tenant=row["tenant"],
            name=row["name"],
            shard=shard,
            generation=row["generation"],
            paused=row["paused"],
            managed_by=None if manager is None else Manager(manager),
            next_run_time=row["next_run_time"],
            last_schedule_time=row["last_schedule_time"],
            last_run_state=None if state is None else State(state),
            last_successful_time=row["last_successful_time"],
            active_runs=row["active_runs"],
            dead_runs=row["dead_runs"],
            missed_runs_dropped=row["missed_dropped"],
            missed_caught_up=row["missed_caught_up"],
            overlap_skipped=row["overlap_skipped"],
            last_job_name=_last_job_name(shard, row),
            paused_reason=PausedReason.from_json(row.get("paused_reason")),
        )


def _last_job_name(shard: int, row: Row) -> str | None:
    run_id, attempt = row["last_run_id"], row["last_attempt"]
    if not row["runs_jobs"] or run_id is None or not attempt:
        return None
    return containers.job_name(row["name"], shards.format_run_id(shard, run_id), attempt)
