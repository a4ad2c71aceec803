"""Request and response models of the public API (camelCase JSON).

Cold routes validate requests with these models (through ``bodies``: camelCase only,
no coercion); the hot worker routes parse by hand (see ``worker_routes``) but document
themselves with the same models, so ``/openapi.json`` describes every route. Bounds
come from ``core.limits``.

The response models describe what ``render`` writes: a field it always writes is
required (nullable where it can be null), one it leaves out when it has no value is
optional and never null. tests/api/test_openapi_fuzz.py holds the routes to both.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from tickwork.core import limits, spec
from tickwork.core.spec import Instant, JobSpec, Priority

State = spec.RunStateName


text_problem = spec.text_problem
json_problem = spec.json_problem
check_instant = spec.check_instant

# Documentation of parameters the routes check themselves (``json_schema_extra``, not
# ``pattern=``: FastAPI would refuse a mismatch with its own problem before the route's).
NAME_SCHEMA: Final[dict[str, Any]] = {
    "pattern": spec.NAME_PATTERN,
    "maxLength": limits.MAX_NAME_LENGTH,
}
TENANT_SCHEMA: Final[dict[str, Any]] = {
    "pattern": spec.TENANT_PATTERN,
    "maxLength": limits.MAX_TENANT_LENGTH,
}


def _never_null(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of a field typed ``X | SkipJsonSchema[None]``: the field is
    left out rather than null, so its schema has no ``default: null`` either."""
    schema.pop("default", None)


# A request gives at most one of the two (the other is then refused naming runAt).
_ONE_WHEN: Final[dict[str, Any]] = {"not": {"required": ["runAt", "delaySeconds"]}}


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Problem(Model):
    model_config = ConfigDict(extra="allow")
    type: str = Field(examples=["https://tickwork.dev/problems/stale-lease"])
    title: str
    status: int
    detail: str
    field: str | SkipJsonSchema[None] = Field(
        default=None,
        description="The offending field, where there is one (left out otherwise).",
        json_schema_extra=_never_null,
    )


class Health(Model):
    status: Literal["ok"]


class Ready(Model):
    """``/readyz`` while at least one shard serves: ``degraded`` when some do not."""

    status: Literal["ready", "degraded"]
    shards: int
    problems: list[str] | SkipJsonSchema[None] = Field(
        default=None,
        description="While degraded: why, one line per shard that does not serve.",
        json_schema_extra=_never_null,
    )
    down: list[int] | SkipJsonSchema[None] = Field(
        default=None,
        description="While degraded: the shards that do not serve.",
        json_schema_extra=_never_null,
    )


class NotReady(Model):
    """``/readyz`` when no shard serves: not a problem document, a status like 200's."""

    status: Literal["unavailable"]
    problems: list[str] = Field(description="Why, one line per shard.")
    down: list[int] = Field(description="The shards that are down, unreachable or not migrated.")


class LastRun(Model):
    run_id: str
    state: State
    due_at: datetime
    finished_at: datetime | None


class PausedReason(Model):
    consecutive_dead_runs: int = Field(
        description="Consecutive dead runs when the job was paused (pauseAfterFailures)."
    )
    last_run_id: str = Field(description="The dead run that paused the job.")
    last_error: JsonValue = Field(description="That run's error.")
    paused_at: datetime
    message: str = Field(description="The same, in one line for people.")


class Job(Model):
    name: str
    tenant: str
    spec: JobSpec
    paused: bool
    paused_reason: PausedReason | None = Field(
        description="Set while tickwork keeps the job paused after pauseAfterFailures "
        "consecutive dead runs (spec.paused may still say false): :resume, or a change "
        "of the spec, ends it. null otherwise."
    )
    consecutive_dead_runs: int = Field(
        description="Runs of the job that went dead since its last succeeded run (or "
        "its last resume): what pauseAfterFailures counts."
    )
    next_run_at: datetime | None
    last_run: LastRun | None
    active_runs: int
    dead_runs: int
    missed_runs_dropped: int = Field(
        description="Fire times the last run_all catch-up dropped over its cap (100)."
    )
    overlap_skipped: int = Field(
        description="Fires overlapPolicy Forbid skipped while an earlier run of the job was "
        "running, since the job was created."
    )
    shard: int
    managed_by: Literal["kubernetes", "manifests"] | None = Field(
        description="Where the job is declared when not through this API: a ScheduledJob "
        "object (kubernetes) or a manifest file of tickwork dev (manifests). PUT, DELETE, "
        ":pause and :resume of such a job answer 409 managed-by-kubernetes (except "
        ":resume of a job tickwork paused, see pausedReason)."
    )
    created_at: datetime
    updated_at: datetime


class DeletedJob(Model):
    name: str
    tenant: str
    cancelled_runs: int = Field(description="Pending runs cancelled.")
    cancel_requested_runs: int = Field(description="Leased runs asked to stop.")


class JobPage(Model):
    items: list[Job]
    next_cursor: str | None


class BackfillRequest(Model):
    """The fire times of the job's schedule in `[from, to)` become runs, due then and
    ready now (at most 1 000 a call: `nextFrom` says where the next call starts)."""

    from_: Instant = Field(alias="from", description="The range's start (inclusive).")
    to: Instant = Field(description="The range's end (exclusive); not after now.")
    dry_run: StrictBool = Field(
        default=False, description="true: list the fire times, make nothing."
    )

    @field_validator("from_", "to")
    @classmethod
    def _instant(cls, value: datetime) -> datetime:
        checked = spec.check_instant(value)
        assert checked is not None
        return checked


class Backfilled(Model):
    job: str
    dry_run: bool
    fire_times: list[datetime] = Field(
        description="The schedule's fire times in the range (this call's part)."
    )
    created: int = Field(description="Runs made now (0 for a dry run).")
    existing: int = Field(description="Fire times that had a run already: nothing made.")
    next_from: datetime | None = Field(
        description="Where the next call starts (`from`), when the range held more fire "
        "times than one call makes; null: done."
    )


class QueueState(Model):
    queue: str
    jobs: int = Field(description="The tenant's jobs that name the queue.")
    paused: bool
    paused_at: datetime | None = Field(description="When the queue was paused (null: it is not).")
    paused_by: str | None = Field(description="Who paused it (null: it is not paused).")


class QueuePage(Model):
    items: list[QueueState]
    next_cursor: None = Field(description="Always null: every queue of the tenant is listed.")


AttemptOutcome = Literal["succeeded", "failed", "lease-expired", "cancelled", "snoozed"]


class Attempt(Model):
    attempt: int
    worker_id: str | None
    leased_at: datetime
    finished_at: datetime | None
    outcome: AttemptOutcome | None = Field(
        description="null while the attempt is in flight. snoozed: the worker snoozed "
        "the run; the next lease carries the same attempt number."
    )
    error: JsonValue


class Run(Model):
    run_id: str
    job: str
    tenant: str
    queue: str
    priority: Priority
    state: State
    attempt: int
    max_attempts: int
    due_at: datetime
    ready_at: datetime
    idempotency_key: str
    payload: JsonValue
    last_error: JsonValue
    cancel_requested: bool
    created_at: datetime
    finished_at: datetime | None


class RunWithAttempts(Run):
    attempts: list[Attempt]


class EnqueuedRun(Run):
    """The answer to an enqueue: the run, and whether the job's rule answered with a run
    it already had (the fields are left out otherwise)."""

    deduplicated: Literal[True] | SkipJsonSchema[None] = Field(
        default=None,
        description="true: the job's `unique` rule answered with the run that holds the "
        "enqueue's key (200); no run was made.",
        json_schema_extra=_never_null,
    )
    debounced: Literal[True] | SkipJsonSchema[None] = Field(
        default=None,
        description="true: the job's `debounce` rule gave this run, not started yet, the "
        "enqueue's payload and moved its start (200); no run was made.",
        json_schema_extra=_never_null,
    )


class RunPage(Model):
    items: list[Run]
    next_cursor: str | None


class AuditEntry(Model):
    at: datetime = Field(description="When the change was made.")
    job: str
    run_id: str | None = Field(description="The run acted on, for run actions.")
    action: str = Field(
        description="create, update, delete, pause, resume (jobs); enqueue, cancel, "
        "replay, discard (runs)",
        examples=["replay"],
    )
    actor: str = Field(description="Who: the token's name, or `manifests`, `operator`, ...")
    detail: JsonValue = Field(description="What changed, by action (e.g. the new generation).")


class AuditPage(Model):
    items: list[AuditEntry]
    next_cursor: str | None


class _RunRequest(Model):
    """What an enqueue and a batch's item check alike: at most one of ``runAt`` and
    ``delaySeconds``, the payload's size and contents, ``runAt`` an instant. Their fields
    are their own (the item's are not described one by one)."""

    model_config = ConfigDict(json_schema_extra=_ONE_WHEN)

    @field_validator("payload", check_fields=False)
    @classmethod
    def _size(cls, value: JsonValue, info: ValidationInfo) -> JsonValue:
        return spec.payload_validator(value, info)  # type: ignore[no-any-return]

    @field_validator("run_at", check_fields=False)
    @classmethod
    def _instant(cls, value: datetime | None) -> datetime | None:
        return check_instant(value)


class EnqueueRequest(_RunRequest):
    """Enqueue a run now (neither field), at ``runAt``, or after ``delaySeconds``."""

    run_at: Instant | None = Field(default=None, description="Run at this instant.")
    delay_seconds: StrictFloat | None = Field(
        default=None,
        ge=0,
        le=limits.MAX_DELAY_SECONDS,
        description="Run after this many seconds.",
    )
    payload: spec.Payload = Field(
        default=None,
        description="Overrides the job's payload (≤ 256 KiB encoded, no credentials).",
    )
    priority: Priority | None = Field(default=None, description="Overrides the job's priority.")
    if_not_running: StrictBool = Field(
        default=False,
        description="Refuse (409 concurrency-limit) while the job is at its concurrency limit.",
    )


class BatchEnqueueItem(_RunRequest):
    run_at: Instant | None = None
    delay_seconds: StrictFloat | None = Field(default=None, ge=0, le=limits.MAX_DELAY_SECONDS)
    payload: spec.Payload = None
    idempotency_key: StrictStr | None = Field(
        default=None, min_length=1, max_length=limits.MAX_IDEMPOTENCY_KEY_LENGTH
    )

    @field_validator("idempotency_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        problem = None if value is None else text_problem(value)
        if problem is not None:
            raise PydanticCustomError("invalid_text", problem)
        return value


class BatchEnqueueRequest(Model):
    runs: list[BatchEnqueueItem] = Field(min_length=1, max_length=limits.MAX_ENQUEUE_BATCH)


class ItemProblem(Model):
    problem: Problem


class BatchEnqueueResponse(Model):
    items: list[EnqueuedRun | ItemProblem] = Field(
        description='In request order: a Run, or {"problem": Problem}.'
    )


# --- the worker path (documented here, parsed by hand in worker_routes) ---


class LeaseRequest(Model):
    queues: list[
        Annotated[
            str,
            Field(min_length=1, max_length=limits.MAX_QUEUE_LENGTH, pattern=spec.QUEUE_PATTERN),
        ]
    ] = Field(min_length=1, max_length=limits.MAX_LEASE_QUEUES)
    max: StrictInt = Field(default=1, ge=1, le=limits.MAX_LEASE_BATCH)
    wait_seconds: StrictFloat = Field(default=0, ge=0, le=limits.MAX_WAIT_SECONDS)
    lease_seconds: StrictFloat = Field(
        default=limits.DEFAULT_LEASE_SECONDS,
        ge=limits.MIN_LEASE_SECONDS,
        le=limits.MAX_LEASE_SECONDS,
    )
    worker_id: str | None = Field(default=None, max_length=limits.MAX_WORKER_ID_LENGTH)


class Lease(Model):
    run_id: str
    job: str
    tenant: str
    queue: str
    priority: Priority
    attempt: int
    idempotency_key: str
    fencing_token: int
    due_at: datetime
    lease_expires_at: datetime
    deadline: datetime
    dry_run: bool = Field(
        description="The job is in dry-run mode (spec.dryRun): log what the run would do "
        "and have no effects."
    )
    payload: JsonValue


class LeaseResponse(Model):
    leases: list[Lease]


class HeartbeatRequest(Model):
    fencing_token: StrictInt = Field(gt=0, lt=2**63)
    extend_seconds: StrictFloat = Field(
        default=limits.DEFAULT_LEASE_SECONDS,
        ge=limits.MIN_LEASE_SECONDS,
        le=limits.MAX_LEASE_SECONDS,
    )


class HeartbeatResponse(Model):
    lease_expires_at: datetime
    cancel_requested: bool


class ErrorReport(Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")
    # Optional: worker_routes reads a missing message as empty.
    message: str = Field(
        default="",
        description=f"The whole error object is at most {limits.MAX_ERROR_BYTES} bytes "
        f"encoded and {limits.MAX_JSON_DEPTH} levels deep.",
    )
    retryable: StrictBool = True


class CompleteRequest(Model):
    fencing_token: StrictInt = Field(gt=0, lt=2**63)
    outcome: Literal["succeeded", "failed", "snoozed"] = Field(
        description="snoozed: the run waits delaySeconds and is leased again, its attempt "
        f"not used and no DLQ entry (at most {limits.MAX_SNOOZES} snoozes a run; past "
        "them a snooze counts as a failed attempt, error reason snooze-limit)."
    )
    error: ErrorReport | None = None
    delay_seconds: (
        Annotated[StrictFloat, Field(ge=0, le=limits.MAX_SNOOZE_SECONDS)] | SkipJsonSchema[None]
    ) = Field(
        default=None,
        description="With outcome snoozed (and only then, where it is required): seconds "
        "before the run is ready again.",
        json_schema_extra=_never_null,
    )


class CompleteResponse(Model):
    state: Literal["succeeded", "retry_wait", "dead", "cancelled"]
    next_attempt_at: datetime | SkipJsonSchema[None] = Field(
        default=None,
        description="When the next attempt is due (retry_wait only).",
        json_schema_extra=_never_null,
    )


class HeartbeatItem(HeartbeatRequest):
    run_id: str = Field(min_length=1)


class CompleteItem(CompleteRequest):
    run_id: str = Field(min_length=1)


class HeartbeatBatchRequest(Model):
    items: list[HeartbeatItem] = Field(min_length=1, max_length=limits.MAX_HEARTBEAT_BATCH)


class CompleteBatchRequest(Model):
    items: list[CompleteItem] = Field(min_length=1, max_length=limits.MAX_COMPLETE_BATCH)


class RunProblem(ItemProblem):
    run_id: str


class HeartbeatResult(HeartbeatResponse):
    run_id: str


class CompleteResult(CompleteResponse):
    run_id: str


class HeartbeatResults(Model):
    items: list[HeartbeatResult | RunProblem] = Field(
        description='In request order: the item\'s result with its runId, or {"runId", '
        '"problem": Problem}.'
    )


class CompleteResults(Model):
    items: list[CompleteResult | RunProblem] = Field(
        description='In request order: the item\'s result with its runId, or {"runId", '
        '"problem": Problem}.'
    )
