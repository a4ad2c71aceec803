"""The job specification: the body of ``PUT /v1/jobs/{name}`` and the ``spec`` of a
``ScheduledJob`` custom resource. One model serves the API, the CRD and the store.

Validation errors carry a stable pydantic error type so adapters can map them to the
public problem types: ``invalid_schedule`` → 400 ``invalid-schedule``,
``payload_too_large`` → 413 ``payload-too-large``, anything else → 400
``invalid-request``; the location of the error names the field.
"""

from __future__ import annotations

import enum
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Final

import orjson
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from tickwork.core.cron import CronError, CronSchedule

MAX_PAYLOAD_BYTES: Final = 256 * 1024
MAX_JITTER_SECONDS: Final = 3600
MAX_TIMEOUT_SECONDS: Final = 7 * 24 * 3600
MAX_ATTEMPTS: Final = 100
MAX_DEADLINE_SECONDS: Final = 366 * 24 * 3600
MAX_CONCURRENCY: Final = 1_000_000

# DNS-1123: the same rules Kubernetes applies to namespaces (tenants) and object names,
# so a job declared as a ScheduledJob and one created over HTTP share one namespace.
_TENANT_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_QUEUE_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?$")


class Priority(enum.StrEnum):
    critical = "critical"
    default = "default"
    bulk = "bulk"

    @property
    def rank(self) -> int:
        """Sort key stored in the database: lower is served first."""
        return _PRIORITY_RANK[self]

    @classmethod
    def from_rank(cls, rank: int) -> Priority:
        return _PRIORITY_BY_RANK[rank]


_PRIORITY_RANK: Final = {Priority.critical: 0, Priority.default: 1, Priority.bulk: 2}
_PRIORITY_BY_RANK: Final = {rank: p for p, rank in _PRIORITY_RANK.items()}


class MissedRunPolicy(enum.StrEnum):
    run_once = "run_once"
    run_all = "run_all"
    skip = "skip"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
    )


class Schedule(_Model):
    """When a recurring job runs."""

    cron: str = Field(
        description="Five-field cron expression (Vixie semantics; names, ranges, steps, "
        "lists, `L`, `nL`, `n#k`).",
        examples=["0 2 * * *"],
    )
    time_zone: str = Field(default="UTC", description="IANA time zone the cron fields are read in.")
    jitter_seconds: int = Field(
        default=60,
        ge=0,
        le=MAX_JITTER_SECONDS,
        description="Spread runs over this many seconds after the nominal time, by a "
        "stable hash of tenant/name. 0 pins the job to the exact time.",
    )
    missed_run_policy: MissedRunPolicy = Field(
        default=MissedRunPolicy.run_once,
        description="What to do with fire times missed while the scheduler was down or "
        "the job was paused: one catch-up run, every missed run (capped), or none.",
    )
    starting_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DEADLINE_SECONDS,
        description="A run not started within this many seconds of its nominal time "
        "ends as `skipped`.",
    )

    # Field validators first, so an error names `schedule.cron` or `schedule.timeZone`.
    @field_validator("cron")
    @classmethod
    def _check_expression(cls, value: str) -> str:
        _parse(value, "UTC")
        return value

    @field_validator("time_zone")
    @classmethod
    def _check_zone(cls, value: str) -> str:
        _parse("* * * * *", value)
        return value

    @model_validator(mode="after")
    def _check_together(self) -> Schedule:
        _parse(self.cron, self.time_zone)
        return self

    def compile(self) -> CronSchedule:
        return CronSchedule.parse(self.cron, self.time_zone)


def _parse(expression: str, zone: str) -> CronSchedule:
    try:
        return CronSchedule.parse(expression, zone)
    except CronError as error:
        raise PydanticCustomError("invalid_schedule", "{reason}", {"reason": str(error)}) from None


class Retry(_Model):
    """How failed attempts are retried (full-jitter exponential backoff)."""

    max_attempts: int = Field(
        default=3,
        ge=1,
        le=MAX_ATTEMPTS,
        description="Attempts in all, the first included; after the last the run is dead.",
    )
    base_seconds: float = Field(
        default=30, ge=0, le=86_400, description="Upper bound of the first retry's delay."
    )
    max_seconds: float = Field(
        default=1800, ge=0, le=7 * 86_400, description="Cap on any retry's delay."
    )

    @model_validator(mode="after")
    def _check_bounds(self) -> Retry:
        if self.max_seconds < self.base_seconds:
            raise PydanticCustomError(
                "retry_bounds", "retry.maxSeconds must be at least retry.baseSeconds"
            )
        return self


def text_problem(text: str) -> str | None:
    """Why PostgreSQL cannot store ``text`` as given (NUL, lone surrogates), or None."""
    if "\x00" in text:
        return "text must not contain NUL (\\u0000) characters"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "text must be valid Unicode (no lone surrogates)"
    return None


def json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored as ``jsonb`` exactly as given, or None: NUL or lone
    surrogates in a string or key, a number outside 64 bits, NaN or an infinity."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return problem
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int) and not -(2**63) <= item < 2**64:
            return "numbers must fit in 64 bits"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite"
    return None


def check_instant(value: datetime | None) -> datetime | None:
    """Refuse instants that have no UTC equivalent in years 1-9999."""
    if value is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise PydanticCustomError(
                "datetime_out_of_range", "the instant must fall in years 1-9999 in UTC"
            ) from None
    return value


def payload_size(payload: Any) -> int:
    return len(orjson.dumps(payload))


def check_payload(payload: Any) -> Any:
    """Refuse payloads the database cannot hold as given (``invalid_payload``) or over
    256 KiB encoded (``payload_too_large``)."""
    problem = json_problem(payload)
    if problem is not None:
        raise PydanticCustomError("invalid_payload", problem)
    size = payload_size(payload)
    if size > MAX_PAYLOAD_BYTES:
        raise PydanticCustomError(
            "payload_too_large",
            "payload is {size} bytes encoded; the limit is {limit}",
            {"size": size, "limit": MAX_PAYLOAD_BYTES},
        )
    return payload


Payload = Annotated[JsonValue, Field(description="JSON handed to the worker, ≤ 256 KiB encoded.")]


class JobSpec(_Model):
    """A job definition. At most one of `schedule` and `runAt`; with neither, the job
    runs only when a run is enqueued through the API."""

    schedule: Schedule | None = Field(default=None, description="Recurring schedule.")
    run_at: AwareDatetime | None = Field(
        default=None, description="One-off: run once at this instant."
    )
    queue: str = Field(default="default", description="Queue workers lease this job's runs from.")
    priority: Priority = Field(default=Priority.default, description="critical, default or bulk.")
    timeout_seconds: int = Field(
        default=3600,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description="Cap on one attempt's total run time, heartbeats included.",
    )
    retry: Retry = Field(default_factory=Retry, description="Retry policy.")
    concurrency: int = Field(
        default=0,
        ge=0,
        le=MAX_CONCURRENCY,
        description="Max runs leased at once; 0 means unlimited.",
    )
    paused: bool = Field(default=False, description="A paused job materialises no new runs.")
    dry_run: bool = Field(
        default=False,
        description="Shadow mode, for running beside an old cron before switching over: "
        "runs are scheduled and leased as usual, but every lease carries `dryRun: true`, "
        "and workers run only handlers that declare dry-run support (they must log what "
        "they would do and have no effects); other handlers are skipped.",
    )
    payload: Payload = None

    @field_validator("run_at")
    @classmethod
    def _check_run_at(cls, value: datetime | None) -> datetime | None:
        return check_instant(value)

    @field_validator("queue")
    @classmethod
    def _check_queue(cls, value: str) -> str:
        check_queue(value)
        return value

    @field_validator("payload")
    @classmethod
    def _check_payload(cls, value: JsonValue) -> JsonValue:
        return check_payload(value)  # type: ignore[no-any-return]

    @model_validator(mode="after")
    def _one_kind(self) -> JobSpec:
        if self.schedule is not None and self.run_at is not None:
            raise PydanticCustomError(
                "schedule_conflict", "a job has at most one of schedule and runAt"
            )
        return self

    def to_document(self) -> dict[str, Any]:
        """The camelCase JSON document stored in the database and shown by the API."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def check_queue(value: str) -> None:
    if not _QUEUE_RE.match(value):
        raise PydanticCustomError(
            "invalid_queue",
            "queue must be 1-63 lowercase letters, digits, '-', '.' or '_', "
            "starting and ending with a letter or digit",
        )


def check_tenant(value: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a DNS-1123 label (a namespace name)."""
    if not _TENANT_RE.match(value):
        raise ValueError(f"tenant {value!r} must be a DNS-1123 label (lowercase, ≤ 63 chars)")


def check_name(value: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a DNS-1123 subdomain (an object name)."""
    if not _NAME_RE.match(value):
        raise ValueError(
            f"job name {value!r} must be a DNS-1123 subdomain (lowercase letters, digits, "
            "'-' and '.', ≤ 253 chars)"
        )


def aware(value: datetime, field: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{field} must carry a time zone offset")
    return value
