"""The job specification: the body of ``PUT /v1/jobs/{name}`` and the ``spec`` of a
``ScheduledJob`` custom resource. One model serves the API, the CRD and the store.

Validation errors carry a stable pydantic error type so adapters can map them to the
public problem types: ``invalid_schedule`` → 400 ``invalid-schedule``,
``payload_too_large`` → 413 ``payload-too-large``, anything else → 400
``invalid-request``; the location of the error names the field (``payload_credential``
errors add the path inside the payload as ``ctx["path"]``).

Input is taken as given, never converted: a number is not a string, a boolean is not a
number, an instant is an RFC 3339 string (or a datetime from YAML), and fields are
camelCase when read from the outside (``parse``). What the models emit is unchanged.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, TypeVar

import jsonpointer
import orjson
from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from tickwork.core import containers, credentials, fields, limits
from tickwork.core.cron import CronError, CronSchedule, DstPolicy, DstRepeated, DstSkipped

# DNS-1123: the same rules Kubernetes applies to namespaces (tenants) and object names,
# so a job declared as a ScheduledJob and one created over HTTP share one namespace.
# Always fullmatch: ``$`` would also match before a final newline.
_TENANT_RE: Final = re.compile(
    rf"[a-z0-9](?:[-a-z0-9]{{0,{limits.MAX_TENANT_LENGTH - 2}}}[a-z0-9])?"
)
# A subdomain is labels joined by dots, each starting and ending with a letter or a
# digit ("a..b", "a.-b" are not names Kubernetes takes); its length is checked apart
# (MAX_NAME_LENGTH), as Kubernetes does.
_LABEL: Final = "[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_NAME_RE: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_QUEUE_RE: Final = re.compile(
    rf"[a-z0-9](?:[-a-z0-9._]{{0,{limits.MAX_QUEUE_LENGTH - 2}}}[a-z0-9])?"
)
# The same rules for JSON Schema (OpenAPI, the CRD): anchored, as a schema's pattern
# matches anywhere in the text otherwise.
QUEUE_PATTERN: Final = f"^{_QUEUE_RE.pattern}$"
NAME_PATTERN: Final = f"^{_NAME_RE.pattern}$"
TENANT_PATTERN: Final = f"^{_TENANT_RE.pattern}$"
# RFC 3339 date-time: full date, time with seconds, and an explicit offset (the space
# separator is RFC 3339's own allowance). Pydantic alone would also read unix
# timestamps, numeric strings and dates.
_RFC3339_RE: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)

# ``model_validate(document, context=STORED)``: a document this module wrote itself,
# checked when it was stored; reading it back skips the checks (they cost a cron parse
# and a payload scan per read) so that a rule added later cannot make old rows
# unreadable.
STORED: Final = {"stored": True}


def _stored(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and info.context.get("stored") is True


def shown(text: str, limit: int = 64) -> str:
    """``text`` for a message: at most ``limit`` characters, quoted."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


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


class OverlapPolicy(enum.StrEnum):
    """What a scheduled fire does while an earlier run of its job is still running
    (CronJob's ``concurrencyPolicy``, spelled the same)."""

    # Members spelled as the values: ``replace`` would shadow ``str.replace``.
    Allow = "Allow"
    Forbid = "Forbid"
    Replace = "Replace"


class _Model(BaseModel):
    # populate_by_name keeps Python code free to write ``JobSpec(timeout_seconds=5)``;
    # documents from outside go through ``parse``, which reads camelCase only.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
    )


def is_rfc3339(text: str) -> bool:
    """An RFC 3339 date-time: full date, time with seconds, an explicit offset."""
    return _RFC3339_RE.fullmatch(text) is not None


def rfc3339(value: Any) -> Any:
    """Before-validator of instants: a datetime (YAML gives those) or an RFC 3339
    string; a number or any other text is refused, not read as a unix timestamp."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and _RFC3339_RE.fullmatch(value):
        return value
    raise PydanticCustomError(
        "invalid_instant",
        "expected an RFC 3339 instant with an offset, like 2026-03-15T02:00:00Z",
    )


Instant = Annotated[AwareDatetime, BeforeValidator(rfc3339)]


class Dst(_Model):
    """What the job does on the nights its zone changes its clocks. A choice left out
    follows the hour field: fixed-hour schedules (the hour field does not start with
    `*`) `first` and `shift`, wildcard-hour ones `both` and `skip`."""

    repeated: DstRepeated | None = Field(
        default=None,
        description="A local time that happens twice (clocks go back) fires at its "
        "`first` occurrence, its `last`, or `both`. Default: `first` for a fixed-hour "
        "schedule, `both` for a wildcard-hour one.",
    )
    skipped: DstSkipped | None = Field(
        default=None,
        description="A local time that does not exist (clocks go forward) fires once at "
        "the first instant after the gap (`shift`; several such times of one gap fire "
        "once), or not at all that day (`skip`). Default: `shift` for a fixed-hour "
        "schedule, `skip` for a wildcard-hour one.",
    )

    def policy(self) -> DstPolicy:
        return DstPolicy(self.repeated, self.skipped)


class Schedule(_Model):
    """When a recurring job runs: a cron expression read in a time zone. Every fire
    time becomes one run, identified by its nominal time (dueAt)."""

    cron: StrictStr = Field(
        description="Five-field cron expression: minute hour day-of-month month "
        "day-of-week, Vixie semantics (names, ranges, steps, lists, `L`, `nL`, `n#k`), "
        'e.g. "0 2 * * *", or a macro: `@yearly`/`@annually` (0 0 1 1 *), `@monthly` '
        "(0 0 1 * *), `@weekly` (0 0 * * 0), `@daily`/`@midnight` (0 0 * * *), `@hourly` "
        "(0 * * * *); kept as written, run as its five fields. `@reboot` and `@every` "
        "are refused. Fixed-hour times run once on DST nights: a skipped local time at "
        "the first instant after the gap, a repeated one at its first occurrence; `dst` can "
        "choose otherwise.",
        examples=["0 2 * * *"],
        json_schema_extra={"maxLength": limits.MAX_CRON_LENGTH},
    )
    time_zone: StrictStr = Field(
        default="UTC",
        description="IANA time zone the cron fields are read in, e.g. Europe/Berlin.",
    )
    jitter_seconds: StrictInt = Field(
        default=60,
        ge=0,
        le=limits.MAX_JITTER_SECONDS,
        description="Spread runs over this many seconds after the nominal time, by a "
        "stable hash of tenant/name. 0 pins the job to the exact time.",
    )
    missed_run_policy: MissedRunPolicy = Field(
        default=MissedRunPolicy.run_once,
        description="What to do with fire times missed while the scheduler was down or "
        "the job was paused: one catch-up run, every missed run (capped), or none.",
    )
    starting_deadline_seconds: StrictInt | None = Field(
        default=None,
        ge=1,
        le=limits.MAX_DEADLINE_SECONDS,
        description="A run not started within this many seconds of its nominal time "
        "ends as `skipped`.",
    )
    dst: Dst | None = Field(
        default=None,
        description="Which fire times run on DST nights: `repeated` (first, last, both) "
        "and `skipped` (shift, skip). Left out, the hour field decides (see docs/cron.md).",
    )

    # Field validators first, so an error names `schedule.cron` or `schedule.timeZone`.
    @field_validator("cron")
    @classmethod
    def _check_expression(cls, value: str, info: ValidationInfo) -> str:
        if not _stored(info):
            _parse(value, "UTC")
        return value

    @field_validator("time_zone")
    @classmethod
    def _check_zone(cls, value: str, info: ValidationInfo) -> str:
        if not _stored(info):
            _parse("* * * * *", value)
        return value

    @field_validator("dst")
    @classmethod
    def _no_empty_dst(cls, value: Dst | None) -> Dst | None:
        # ``dst: {}`` chooses nothing: the same spec as no ``dst``, shown and stored so.
        if value is not None and value.repeated is None and value.skipped is None:
            return None
        return value

    @model_validator(mode="after")
    def _check_together(self, info: ValidationInfo) -> Schedule:
        if not _stored(info):
            _parse(self.cron, self.time_zone)
        return self

    @property
    def dst_policy(self) -> DstPolicy:
        """The DST policy as given: a choice left out is None (the hour field's rule)."""
        return _HOUR_FIELD_RULE if self.dst is None else self.dst.policy()

    def compile(self) -> CronSchedule:
        return _parsed(self.cron, self.time_zone, self.dst_policy)


def _parse(expression: str, zone: str) -> CronSchedule:
    try:
        return _parsed(expression, zone)
    except CronError as error:
        raise PydanticCustomError("invalid_schedule", "{reason}", {"reason": str(error)}) from None


# No DST choice made: each follows the hour field.
_HOUR_FIELD_RULE: Final = DstPolicy()


@functools.lru_cache(maxsize=4096)
def _parsed(expression: str, zone: str, dst: DstPolicy = _HOUR_FIELD_RULE) -> CronSchedule:
    """Schedules are immutable: a spec is validated three times per parse (cron, zone,
    both), and a fleet shares few expressions (the operator's resync parses them all)."""
    return CronSchedule.parse(expression, zone, dst)


class Retry(_Model):
    """How failed attempts are retried (full-jitter exponential backoff)."""

    max_attempts: StrictInt = Field(
        default=3,
        ge=1,
        le=limits.MAX_ATTEMPTS,
        description="Attempts in all, the first included; after the last the run is dead.",
    )
    # StrictFloat takes integers too (30 is a number of seconds), not strings or booleans.
    base_seconds: StrictFloat = Field(
        default=30,
        ge=0,
        le=limits.MAX_RETRY_BASE_SECONDS,
        description="Upper bound of the first retry's delay.",
    )
    max_seconds: StrictFloat = Field(
        default=1800,
        ge=0,
        le=limits.MAX_RETRY_MAX_SECONDS,
        description="Cap on any retry's delay.",
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


# A JSON value of N nodes encodes to at least about 2N bytes ("0," per number), so a
# payload with more nodes than this cannot fit in MAX_PAYLOAD_BYTES; counting stops
# here, before a YAML alias bomb (shared sub-trees) is walked in full.
_MAX_NODES: Final = limits.MAX_PAYLOAD_BYTES


def _json_problem(value: Any, max_depth: int) -> tuple[str, str] | None:
    """``(pydantic error type, message)`` for a value that cannot be stored as given."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    while pending:
        item, depth = pending.pop()
        nodes += 1
        if nodes > _MAX_NODES:
            return (
                "payload_too_large",
                f"more than {_MAX_NODES} values: too many to fit in "
                f"{limits.MAX_PAYLOAD_BYTES} bytes",
            )
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return "invalid_payload", problem
        elif isinstance(item, dict | list):
            # Also the end of a YAML document that contains itself (``&a [*a]``).
            if depth >= max_depth:
                return (
                    "json_too_deep",
                    f"JSON nests deeper than {max_depth} levels of arrays and objects",
                )
            if isinstance(item, dict):
                pending.extend((key, depth + 1) for key in item)
                pending.extend((child, depth + 1) for child in item.values())
            else:
                pending.extend((child, depth + 1) for child in item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int) and not -(2**63) <= item < 2**64:
            return "invalid_payload", "numbers must fit in 64 bits"
        elif isinstance(item, float) and not math.isfinite(item):
            return "invalid_payload", "numbers must be finite"
    return None


def json_problem(value: Any, max_depth: int = limits.MAX_JSON_DEPTH) -> str | None:
    """Why ``value`` cannot be stored as ``jsonb`` exactly as given, or None: NUL or lone
    surrogates in a string or key, a number outside 64 bits, NaN or an infinity,
    arrays and objects nested deeper than ``max_depth``, or too many values."""
    found = _json_problem(value, max_depth)
    return None if found is None else found[1]


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


def check_payload_shape(payload: Any) -> Any:
    """Before-validator of payloads: refuse values nested too deep or too large to walk,
    before anything recursive (pydantic, the encoder) sees them."""
    found = _json_problem(payload, limits.MAX_JSON_DEPTH)
    if found is not None:
        raise PydanticCustomError(*found)
    return payload


def _check_payload_content(payload: Any) -> Any:
    size = payload_size(payload)
    if size > limits.MAX_PAYLOAD_BYTES:
        raise PydanticCustomError(
            "payload_too_large",
            "payload is {size} bytes encoded; the limit is {limit}",
            {"size": size, "limit": limits.MAX_PAYLOAD_BYTES},
        )
    finding = credentials.find(payload)
    if finding is not None:
        raise PydanticCustomError(
            "payload_credential",
            "{path}: looks like {what}; payloads must not carry secrets: pass a reference "
            'such as {"secretRef": "name"} and resolve it in the worker',
            {"path": finding.path, "what": finding.describe(), "detector": finding.detector},
        )
    return payload


def valid_payload(payload: Any) -> bool:
    """Whether a parsed JSON value passes every check of the ``Payload`` type (shape,
    size, no credentials), for callers that validate without pydantic."""
    try:
        _check_payload_content(check_payload_shape(payload))
    except PydanticCustomError:
        return False
    return True


def encoded_payloads(payloads: Sequence[Any]) -> list[bytes] | None:
    """The JSON text of each of ``payloads`` (values parsed from JSON) when every one
    passes the checks of ``valid_payload``, else None (the caller then finds out which
    fails, and why, through the model).

    The same checks, made for a batch: one walk of all the values for shape and
    storability that also tests each key holding a non-empty string against the secret
    keys (once per distinct key), one encoding each (its size, and the text the
    database stores), and one credential prefilter over the texts of the whole batch; a
    value is walked by the full credential scan only when its own text holds what a
    detector looks for. The count of values is not kept: parsed JSON shares no part, so
    a value of more than ``_MAX_NODES`` values encodes to more than the size limit.
    """
    if not _storable(payloads, {}):
        return None
    encoded = [orjson.dumps(payload) for payload in payloads]
    if encoded and max(map(len, encoded)) > limits.MAX_PAYLOAD_BYTES:
        return None
    # orjson escapes no character a detector looks for, and a newline never appears
    # unescaped in its output: the joined texts hold a fragment only where one text does.
    if credentials.may_hold_value(b"\n".join(encoded)):
        for payload, text in zip(payloads, encoded, strict=True):
            if credentials.may_hold_value(text) and credentials.find(payload) is not None:
                return None
    return encoded


def _storable(payloads: Sequence[Any], secret_keys: dict[str, bool]) -> bool:
    """``_json_problem`` finds nothing in any of ``payloads`` (but the count of values)
    and no key of them names a secret (``credentials``' ``secret-key``: ``secret_keys``
    remembers each key's answer); False also for a type JSON parsing does not make (the
    model decides those). Objects of scalars, the usual payload, are walked without a
    stack."""
    pending: list[tuple[Any, int]] = []
    for payload in payloads:
        kind = type(payload)
        if kind is dict:
            if not _storable_object(payload, 0, pending, secret_keys):
                return False
        elif kind is list:
            pending.append((payload, 0))
        elif not _storable_scalar(payload):
            return False
    while pending:
        item, depth = pending.pop()
        if type(item) is dict:
            if not _storable_object(item, depth, pending, secret_keys):
                return False
            continue
        if depth >= limits.MAX_JSON_DEPTH:
            return False
        for child in item:
            kind = type(child)
            if kind is dict or kind is list:
                pending.append((child, depth + 1))
            elif not _storable_scalar(child):
                return False
    return True


def _storable_object(
    item: dict[Any, Any],
    depth: int,
    pending: list[tuple[Any, int]],
    secret_keys: dict[str, bool],
) -> bool:
    if depth >= limits.MAX_JSON_DEPTH:
        return False
    for key, child in item.items():
        if type(key) is not str or "\x00" in key:
            return False
        if not key.isascii() and text_problem(key) is not None:
            return False
        kind = type(child)
        if kind is str:
            if "\x00" in child or (not child.isascii() and text_problem(child) is not None):
                return False
            if child.strip():
                secret = secret_keys.get(key)
                if secret is None:
                    secret = secret_keys[key] = credentials.secret_key(key)
                if secret:
                    return False
        elif kind is dict or kind is list:
            pending.append((child, depth + 1))
        elif not _storable_scalar(child):
            return False
    return True


def _storable_scalar(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return "\x00" not in value and (value.isascii() or text_problem(value) is None)
    if kind is int:
        return bool(-(2**63) <= value < 2**64)
    if kind is float:
        return math.isfinite(value)
    return value is None or kind is bool


def payload_validator(payload: Any, info: ValidationInfo) -> Any:
    """After-validator of payload fields (skipped for documents read back from storage)."""
    # The Payload type's before-validator has checked the shape already.
    return payload if _stored(info) else _check_payload_content(payload)


def payload_shape_validator(payload: Any, info: ValidationInfo) -> Any:
    return payload if _stored(info) else check_payload_shape(payload)


Payload = Annotated[
    JsonValue,
    BeforeValidator(payload_shape_validator),
    Field(description="JSON handed to the worker, ≤ 256 KiB encoded, no credentials."),
]


def job_template_validator(template: Any, info: ValidationInfo) -> Any:
    """Before-validator of ``jobTemplate`` (skipped for documents read back from
    storage): storable JSON, and the shape ``containers.check_template`` asks for."""
    if template is None or _stored(info):
        return template
    found = _json_problem(template, limits.MAX_JSON_DEPTH)
    if found is not None:
        raise PydanticCustomError(*found)
    try:
        containers.check_template(template)
    except containers.TemplateError as error:
        raise PydanticCustomError(
            "invalid_job_template", "{reason}", {"reason": error.message, "path": error.path}
        ) from None
    return template


JobTemplate = Annotated[
    dict[str, JsonValue],
    BeforeValidator(job_template_validator),
    WithJsonSchema(containers.template_schema(closed=True)),
]


# The states of a run, as records.State names them (records imports this module).
RunStateName = Literal[
    "scheduled",
    "ready",
    "leased",
    "retry_wait",
    "succeeded",
    "dead",
    "cancelled",
    "discarded",
    "skipped",
]
PENDING_STATES: Final[tuple[RunStateName, ...]] = ("scheduled", "ready", "retry_wait")
FINISHED_STATES: Final = frozenset({"succeeded", "dead", "cancelled", "discarded", "skipped"})
# A key longer than this (encoded) is stored as its SHA-256: a whole payload may be one.
_KEY_TEXT_BYTES: Final = 256


class _KeyedRule(_Model):
    """A rule that groups a job's enqueues by a key read from each run's payload."""

    key: StrictStr | None = Field(
        default=None,
        description="JSON pointer (RFC 6901) to the key in the run's payload (the "
        "enqueue's payload, or the job's when the enqueue gives none), e.g. "
        '"/customerId"; "" takes the whole payload. Absent: one key for the whole job. An '
        "enqueue whose payload has nothing there is refused (400 naming payload).",
        json_schema_extra={
            "maxLength": limits.MAX_FLOW_KEY_LENGTH,
            "pattern": "^(/([^~/]|~[01])*)*$",
        },
    )

    @field_validator("key")
    @classmethod
    def _check_pointer(cls, value: str | None) -> str | None:
        if value is not None:
            if len(value) > limits.MAX_FLOW_KEY_LENGTH:
                raise PydanticCustomError(
                    "invalid_pointer", f"at most {limits.MAX_FLOW_KEY_LENGTH} characters"
                )
            try:
                jsonpointer.JsonPointer(value)
            except jsonpointer.JsonPointerException as error:
                raise PydanticCustomError(
                    "invalid_pointer",
                    '{reason}: a JSON pointer (RFC 6901) such as /customerId, or "" for '
                    "the whole payload",
                    {"reason": str(error)},
                ) from None
        return value

    def key_of(self, payload: Any) -> str | None:
        """The key of a run with ``payload``: ``""`` for the job's one key, else the
        pointer and the canonical JSON of the value it names (the SHA-256 of that when
        long); None when the payload has nothing there."""
        if self.key is None:
            return ""
        value = jsonpointer.resolve_pointer(payload, self.key, _MISSING)
        if value is _MISSING:
            return None
        text = self.key + " " + orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
        if len(text.encode()) > _KEY_TEXT_BYTES:
            return self.key + " sha256:" + hashlib.sha256(text.encode()).hexdigest()
        return text


_MISSING: Final = object()


class Unique(_KeyedRule):
    """At most one run per key: an enqueue whose key a run of the job in `states`
    holds answers that run (200, `deduplicated: true`) instead of making another.
    Scheduled fires neither obey nor hold a key (overlapPolicy governs those)."""

    states: list[Annotated[RunStateName, Field(description="A run state.")]] = Field(
        default_factory=lambda: list(PENDING_STATES),
        description="The states in which a run holds its key: scheduled, ready and "
        "retry_wait always (the default: runs not started yet); add leased for a run "
        "being worked on, and finished states (succeeded, dead, cancelled, discarded, "
        "skipped) for forSeconds after the run finished.",
    )
    for_seconds: StrictInt | None = Field(
        default=None,
        ge=1,
        le=limits.MAX_UNIQUE_FOR_SECONDS,
        description="How long after it finished a run in a finished state of `states` "
        "still holds its key; required with such a state, refused without one.",
    )

    @field_validator("states")
    @classmethod
    def _check_states(cls, value: list[str]) -> list[str]:
        missing = [state for state in PENDING_STATES if state not in value]
        if missing:
            raise PydanticCustomError(
                "unique_states",
                "must include scheduled, ready and retry_wait (runs not started yet "
                "always hold their key); missing: {missing}",
                {"missing": ", ".join(missing)},
            )
        if len(set(value)) != len(value):
            raise PydanticCustomError("unique_states", "names a state twice")
        return value

    @model_validator(mode="after")
    def _check_for_seconds(self) -> Unique:
        # A rule across two fields, said of forSeconds (error_field reads ``field``).
        finished = sorted(FINISHED_STATES.intersection(self.states))
        if finished and self.for_seconds is None:
            raise PydanticCustomError(
                "unique_for_seconds",
                "required when states include a finished state ({finished}): how long "
                "after it finished such a run still holds its key",
                {"finished": ", ".join(finished), "field": "forSeconds"},
            )
        if not finished and self.for_seconds is not None:
            raise PydanticCustomError(
                "unique_for_seconds",
                "counts from the end of a run: add the finished states it applies to "
                "(such as succeeded) to states, or leave forSeconds out",
                {"field": "forSeconds"},
            )
        return self

    def holds(self, state: str, finished_at: datetime | None, now: datetime) -> bool:
        """Whether a run in ``state`` (finished at ``finished_at``) holds its key."""
        if state not in self.states:
            return False
        if state not in FINISHED_STATES:
            return True
        return (
            finished_at is not None
            and self.for_seconds is not None
            and (now - finished_at).total_seconds() < self.for_seconds
        )


class Debounce(_KeyedRule):
    """Bursts make one run: an enqueue whose key a run not started yet holds gives that
    run its payload and moves its start to `seconds` from now (200, `debounced: true`),
    never later than `maxSeconds` after the burst's first enqueue."""

    seconds: StrictInt = Field(
        ge=1,
        le=limits.MAX_DEBOUNCE_SECONDS,
        description="A run starts this many seconds after the last enqueue of its burst.",
    )
    max_seconds: StrictInt | None = Field(
        default=None,
        ge=1,
        le=limits.MAX_DEBOUNCE_MAX_SECONDS,
        description="The longest a burst delays its run, from the burst's first enqueue "
        "(at least seconds). Default: 10 times seconds, at most "
        f"{limits.MAX_DEBOUNCE_MAX_SECONDS}.",
    )

    @field_validator("max_seconds")
    @classmethod
    def _check_max(cls, value: int | None, info: ValidationInfo) -> int | None:
        seconds = info.data.get("seconds")
        if value is not None and seconds is not None and value < seconds:
            raise PydanticCustomError("debounce_bounds", "must be at least debounce.seconds")
        return value

    @property
    def longest_seconds(self) -> int:
        """The cap on a burst's delay, its default applied."""
        if self.max_seconds is not None:
            return self.max_seconds
        return min(10 * self.seconds, limits.MAX_DEBOUNCE_MAX_SECONDS)


class ConcurrencyStrategy(enum.StrEnum):
    """What a run does when it finds its concurrency key at the limit (Hatchet's
    GROUP_ROUND_ROBIN, CANCEL_NEWEST and CANCEL_IN_PROGRESS)."""

    Wait = "Wait"
    CancelNewest = "CancelNewest"
    CancelRunning = "CancelRunning"


def _flow_pointer(value: str | None) -> str | None:
    """A JSON pointer (RFC 6901) into the payload: "" or "/a/b", "~" only as ~0 or ~1."""
    if value is not None and (
        (value and not value.startswith("/")) or re.search(r"~(?![01])", value)
    ):
        raise PydanticCustomError(
            "invalid_pointer",
            'a JSON pointer (RFC 6901) such as "/customerId" ("" for the whole payload)',
        )
    return value


_FLOW_KEY_DESCRIPTION: Final = (
    "JSON pointer (RFC 6901) to a value in the run's payload, e.g. '/customerId': "
    "runs with the same value share one limit, each value its own. A payload with "
    'nothing there counts under the value "". Absent: one limit for all the runs.'
)


class ConcurrencyKey(_Model):
    """Makes `concurrency` a limit per key (and per group of jobs): at most
    `concurrency` runs with the same key leased at once."""

    key: StrictStr | None = Field(
        default=None,
        description=_FLOW_KEY_DESCRIPTION,
        json_schema_extra={"maxLength": limits.MAX_FLOW_KEY_LENGTH},
    )
    group: StrictStr | None = Field(
        default=None,
        description="Jobs naming the same group (in one tenant) share the limit: at most "
        "`concurrency` runs of all of them with the same key leased at once. The limit "
        "holds among the jobs of the group on one shard (docs/flow-control.md).",
        json_schema_extra={"maxLength": limits.MAX_QUEUE_LENGTH, "pattern": QUEUE_PATTERN},
    )
    strategy: ConcurrencyStrategy = Field(
        default=ConcurrencyStrategy.Wait,
        description="When a key is at its limit: Wait (the newest runs wait their turn), "
        "CancelNewest (runs over the limit are cancelled), CancelRunning (the running "
        "runs are asked to stop, and the newest start when they have).",
    )

    @field_validator("key")
    @classmethod
    def _check_key(cls, value: str | None) -> str | None:
        return _flow_pointer(value)

    @field_validator("group")
    @classmethod
    def _check_group(cls, value: str | None) -> str | None:
        if value is not None:
            check_queue(value)
        return value


class RateLimit(_Model):
    """At most `limit` runs leased in any `periodSeconds` seconds (a sliding window),
    per key value when `key` is given. Runs held back stay ready and use no attempt."""

    limit: StrictInt = Field(
        ge=1, le=limits.MAX_RATE_LIMIT, description="Runs leased at most in any period."
    )
    period_seconds: StrictInt = Field(
        ge=1, le=limits.MAX_RATE_PERIOD_SECONDS, description="The period, in seconds."
    )
    key: StrictStr | None = Field(
        default=None,
        description=_FLOW_KEY_DESCRIPTION,
        json_schema_extra={"maxLength": limits.MAX_FLOW_KEY_LENGTH},
    )

    @field_validator("key")
    @classmethod
    def _check_key(cls, value: str | None) -> str | None:
        return _flow_pointer(value)


class NotifyEvent(enum.StrEnum):
    """What a job's notification target is told about."""

    dead = "dead"
    auto_paused = "autoPaused"
    deadline_missed = "deadlineMissed"
    leased_too_long = "leasedTooLong"


# HH:MM on a 24-hour clock: the local time a run must have succeeded by.
_DEADLINE_RE: Final = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")


# The system job that carries notifications: its runs are the deliveries, on a queue
# of their own that tickwork's scheduler serves. Users can neither create a job of this
# name (engine.jobs) nor give a job this queue (JobSpec's queue validator).
NOTIFY_JOB: Final = "tickwork.notify"
NOTIFY_QUEUE: Final = "tickwork-notifications"


class Notify(_Model):
    """Where and when the job's notifications go."""

    target: StrictStr | None = Field(
        default=None,
        description="The tenant's notification target to send to "
        "(PUT /v1/notification-targets/{name}); absent: the tenant's default target.",
        json_schema_extra={"maxLength": limits.MAX_NAME_LENGTH, "pattern": NAME_PATTERN},
    )
    on: list[NotifyEvent] = Field(
        default_factory=lambda: list(NotifyEvent),
        description="The events notified: `dead` (a run of the job went dead), "
        "`autoPaused` (pauseAfterFailures paused the job), `deadlineMissed` (a run not "
        "succeeded by `deadline`) and `leasedTooLong` (an attempt leased longer than "
        "`leasedLongerThanSeconds`). Default: all of them; the last two only where their "
        "setting is given. Empty: none.",
    )
    deadline: StrictStr | None = Field(
        default=None,
        description='A local time, "HH:MM" (24-hour), in `timeZone`: a run not succeeded '
        "by the first such time after its due time is notified (`deadlineMissed`), "
        "whatever state it is in then. A time skipped by a DST change counts as the "
        "instant after the gap; a repeated one at its first occurrence.",
        examples=["06:00"],
        json_schema_extra={"pattern": f"^{_DEADLINE_RE.pattern}$", "maxLength": 5},
    )
    time_zone: StrictStr | None = Field(
        default=None,
        description="The IANA time zone `deadline` is read in; absent: the schedule's "
        "`timeZone`, else UTC.",
    )
    leased_longer_than_seconds: StrictInt | None = Field(
        default=None,
        ge=1,
        le=limits.MAX_LEASE_WATCH_SECONDS,
        description="An attempt still leased (running) this many seconds after it was "
        "leased is notified (`leasedTooLong`), once per attempt.",
    )

    @field_validator("target")
    @classmethod
    def _check_target(cls, value: str | None) -> str | None:
        if value is not None:
            check_name(value)
        return value

    @field_validator("on")
    @classmethod
    def _distinct(cls, value: list[NotifyEvent]) -> list[NotifyEvent]:
        return list(dict.fromkeys(value))

    @field_validator("deadline")
    @classmethod
    def _check_deadline(cls, value: str | None) -> str | None:
        if value is not None and not _DEADLINE_RE.fullmatch(value):
            raise PydanticCustomError("deadline", 'a local time "HH:MM", 00:00 to 23:59')
        return value

    @field_validator("time_zone")
    @classmethod
    def _check_zone(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not _stored(info):
            _parse("* * * * *", value)
        return value


class JobSpec(_Model):
    """A job definition. At most one of `schedule` and `runAt`; with neither, the job
    runs only when a run is enqueued through the API."""

    # Said in the JSON schema too, for the OpenAPI document (the CRD, which keeps only
    # the keywords a structural schema allows, says it with a CEL rule instead).
    model_config = ConfigDict(json_schema_extra={"not": {"required": ["schedule", "runAt"]}})

    schedule: Schedule | None = Field(
        default=None,
        description="Recurring schedule: a cron expression in a time zone. Not with runAt.",
    )
    run_at: Instant | None = Field(
        default=None,
        description="One-off: run once at this instant (RFC 3339 with an offset). Not with "
        "schedule.",
    )
    queue: StrictStr = Field(
        default="default",
        description="Queue workers lease this job's runs from (1-63 lowercase letters, "
        "digits, '-', '.', '_').",
        json_schema_extra={
            "maxLength": limits.MAX_QUEUE_LENGTH,
            "pattern": QUEUE_PATTERN,
        },
    )
    priority: Priority = Field(
        default=Priority.default,
        description="critical, default or bulk: when every priority has ready work, "
        "claims go 70/25/5 between them.",
    )
    timeout_seconds: StrictInt = Field(
        default=3600,
        ge=1,
        le=limits.MAX_TIMEOUT_SECONDS,
        description="Cap on one attempt's total run time, heartbeats included.",
    )
    retry: Retry = Field(
        default_factory=Retry,
        description="Retry policy of a failed attempt: full-jitter exponential backoff, "
        "dead (in the dead-letter queue) after maxAttempts.",
    )
    concurrency: StrictInt = Field(
        default=0,
        ge=0,
        le=limits.MAX_CONCURRENCY,
        description="Max runs leased at once; 0 means unlimited.",
    )
    concurrency_key: ConcurrencyKey | None = Field(
        default=None,
        description="Makes `concurrency` a limit per key of the payload and per group "
        "of jobs, with a strategy for runs over it. Needs concurrency >= 1.",
    )
    rate_limit: RateLimit | None = Field(
        default=None,
        description="At most `limit` runs leased in any `periodSeconds` seconds (per key "
        "of the payload, if given); runs held back stay ready.",
    )
    overlap_policy: OverlapPolicy = Field(
        default=OverlapPolicy.Allow,
        description="What a scheduled fire (of schedule or runAt) does while an earlier "
        "run of the job is still running (ready, leased or waiting to retry), as a "
        "CronJob's concurrencyPolicy: Allow starts it anyway; Forbid skips it (the run "
        "ends `skipped`, counted as overlapSkipped in the job's status); Replace asks the "
        "running run to stop (cancelRequested, its lease no longer extended) and starts the "
        "new one. Runs enqueued through the API are started whatever the policy.",
    )
    paused: StrictBool = Field(
        default=False,
        description="A paused job materialises no new runs; on resume, the fire times "
        "missed meanwhile follow schedule.missedRunPolicy.",
    )
    dry_run: StrictBool = Field(
        default=False,
        description="Shadow mode, for running beside an old cron before switching over: "
        "runs are scheduled and leased as usual, but every lease carries `dryRun: true`, "
        "and workers run only handlers that declare dry-run support (they must log what "
        "they would do and have no effects); other handlers are skipped.",
    )
    pause_after_failures: StrictInt | None = Field(
        default=None,
        ge=1,
        le=limits.MAX_PAUSE_AFTER_FAILURES,
        description="Pause the job after this many consecutive dead runs (out of "
        "attempts, taken back expired, or failed as not retryable), in the transaction "
        "that ends the last of them; a succeeded run starts the count again. The job "
        "stays paused, with the reason and the last error in its status, until resumed "
        "(:resume, `tickwork jobs resume`, the dashboard) or its spec is changed. "
        "Absent: never.",
    )
    unique: Unique | None = Field(
        default=None,
        description="At most one run per key: an enqueue whose key a run of the job "
        "holds (by default one not started yet) answers that run (200, deduplicated) "
        "instead of making another. Not with debounce.",
    )
    debounce: Debounce | None = Field(
        default=None,
        description="One run per burst: an enqueue whose key a run not started yet holds "
        "replaces that run's payload and moves its start to `seconds` from now (at most "
        "`maxSeconds` after the burst began). Not with unique.",
    )
    notify: Notify | None = Field(
        default=None,
        description="Send the job's notifications (a dead run, the job auto-paused, a "
        "run not succeeded by a deadline, an attempt leased too long) to a notification "
        "target of the tenant; absent: the tenant's default target, if it has one, for "
        "dead runs and auto-pauses. See docs/operations.md, Notifications.",
    )
    payload: Payload = None
    job_template: JobTemplate | None = Field(
        default=None, description=containers.template_schema(closed=True)["description"]
    )

    @field_validator("run_at")
    @classmethod
    def _check_run_at(cls, value: datetime | None) -> datetime | None:
        return check_instant(value)

    @field_validator("queue")
    @classmethod
    def _check_queue(cls, value: str, info: ValidationInfo) -> str:
        check_queue(value)
        if value == NOTIFY_QUEUE and not _stored(info):
            raise PydanticCustomError("reserved_queue", "this queue is reserved for tickwork")
        return value

    @field_validator("payload")
    @classmethod
    def _check_payload(cls, value: JsonValue, info: ValidationInfo) -> JsonValue:
        return payload_validator(value, info)  # type: ignore[no-any-return]

    @model_validator(mode="after")
    def _one_kind(self) -> JobSpec:
        if self.schedule is not None and self.run_at is not None:
            raise PydanticCustomError(
                "schedule_conflict", "a job has at most one of schedule and runAt"
            )
        return self

    @model_validator(mode="after")
    def _one_flow_rule(self) -> JobSpec:
        if self.unique is not None and self.debounce is not None:
            raise PydanticCustomError(
                "flow_rule_conflict",
                "a job has at most one of unique and debounce (a debounced job keeps one "
                "run not started yet per key already)",
                {"field": "debounce"},
            )
        return self

    @model_validator(mode="after")
    def _keyed_concurrency(self) -> JobSpec:
        if self.concurrency_key is not None and self.concurrency == 0:
            raise PydanticCustomError(
                "concurrency_key_unlimited",
                "needs a concurrency limit: set concurrency to 1 or more",
                {"field": "concurrencyKey"},
            )
        return self

    @property
    def run_concurrency(self) -> int:
        """The ``concurrency`` each run carries: the limit, else
        ``limits.RATE_ONLY_CONCURRENCY`` with a rate limit (on the claim's limited
        path), else 0 (the plain path). The store's ``run_concurrency`` says the same."""
        if self.concurrency:
            return self.concurrency
        return limits.RATE_ONLY_CONCURRENCY if self.rate_limit is not None else 0

    @property
    def flow_rule(self) -> Unique | Debounce | None:
        """The rule that groups the job's enqueues by key, if any."""
        return self.unique or self.debounce

    @model_validator(mode="after")
    def _runner_queue(self, info: ValidationInfo) -> JobSpec:
        # A queue is served by workers or by job-runners, never both (core.containers).
        if not _stored(info):
            problem = containers.queue_problem(self.queue, self.job_template is not None)
            if problem is not None:
                raise PydanticCustomError(
                    "runner_queue", "{reason}", {"reason": problem, "field": "queue"}
                )
        return self

    def to_document(self) -> dict[str, Any]:
        """The camelCase JSON document shown by the API."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_stored(self) -> dict[str, Any]:
        """The document stored in the database: ``to_document`` without the fields a
        release added, while they hold their defaults. The previous release reads
        stored specs with unknown fields refused, so during an upgrade (or after a
        rollback) it reads every job that does not use what it does not know."""
        document = self.to_document()
        for key, default in _ADDED_FIELD_DEFAULTS.items():
            # A dotted key names a field of a nested object ("schedule.dst").
            *parents, leaf = key.split(".")
            node: Any = document
            for parent in parents:
                node = node.get(parent) if isinstance(node, dict) else None
            if isinstance(node, dict) and node.get(leaf, default) == default:
                node.pop(leaf, None)
        return document


# Fields added to JobSpec after the first release, with their defaults: kept out of
# stored documents while at the default (``JobSpec.to_stored``). An entry leaves this
# table once no supported release predates its field. ``schedule.dst`` at its default
# chooses nothing (the model shows that as no ``dst`` at all).
_ADDED_FIELD_DEFAULTS: Final[dict[str, Any]] = {
    "overlapPolicy": "Allow",
    "schedule.dst": {},
    "pauseAfterFailures": None,
    "concurrencyKey": None,
    "rateLimit": None,
    "notify": None,
}


_Parsed = TypeVar("_Parsed", bound=BaseModel)
_LOCATION_ROOTS: Final = frozenset({"body", "query", "path", "header"})


def error_field(error: Mapping[str, Any]) -> str | None:
    """The field a pydantic error names, as the contract writes it: ``schedule.cron``,
    ``runs[3].payload``, ``payload.db.password`` (a credential's place in a payload),
    ``jobTemplate.spec.template.spec.containers[0].image``."""
    parts = list(error.get("loc", ()))
    if parts and parts[0] in _LOCATION_ROOTS:
        parts = parts[1:]
    text = ""
    for part in parts:
        if isinstance(part, int):
            text = fields.index(text, part)
        elif part in ("function-after", "function-before") or "[" in str(part):
            continue  # pydantic's names for validators and union members
        else:
            text = fields.key(text, str(part))
    context = error.get("ctx") or {}
    if error.get("type") in _INNER_PATH_ERRORS and isinstance(context.get("path"), str):
        inner = context["path"]
        text = text + inner if not text or not inner or inner.startswith("[") else f"{text}.{inner}"
    if isinstance(context.get("field"), str):
        # A rule across fields, said of the one to change (inside the object it names).
        text = fields.key(text, context["field"]) if text else context["field"]
    return text or None


# Errors that name a place inside their field (``ctx["path"]``).
_INNER_PATH_ERRORS: Final = frozenset({"payload_credential", "invalid_job_template"})


def error_message(error: Mapping[str, Any]) -> str:
    """The message of a pydantic error, without a credential path it already names."""
    message = str(error.get("msg", "invalid value"))
    if error.get("type") == "extra_forbidden":
        location = error.get("loc") or ("",)
        key = str(location[-1])
        camel = to_camel(key)
        if "_" in key and camel != key:
            return f"unknown field (fields are camelCase: {camel!r}, not {key!r})"
        return "unknown field"
    context = error.get("ctx") or {}
    if error.get("type") == "payload_credential" and isinstance(context.get("path"), str):
        message = message.removeprefix(context["path"] + ": ")
    return message


def parse(model: type[_Parsed], document: Any) -> _Parsed:
    """A model from a document given from outside (an API body, a manifest): camelCase
    field names only, so ``timeout_seconds`` is an unknown field, not an alias."""
    return model.model_validate(document, by_name=False, by_alias=True)


def check_queue(value: str) -> None:
    if not _QUEUE_RE.fullmatch(value):
        raise PydanticCustomError(
            "invalid_queue",
            "queue must be 1-63 lowercase letters, digits, '-', '.' or '_', "
            "starting and ending with a letter or digit",
        )


def check_tenant(value: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a DNS-1123 label (a namespace name)."""
    if not isinstance(value, str) or not _TENANT_RE.fullmatch(value):
        shown_value = shown(value) if isinstance(value, str) else f"(a {type(value).__name__})"
        raise ValueError(
            f"tenant {shown_value} must be a DNS-1123 label (lowercase letters, digits and "
            f"'-', ≤ {limits.MAX_TENANT_LENGTH} chars)"
        )


# What earlier releases took for a job name: '.' anywhere inside ("a..b"). Jobs stored
# under such a name stay readable, deletable and runnable; no new one is made.
_STORED_NAME_RE: Final = re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?")


def check_name(value: str, *, stored: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is a DNS-1123 subdomain (an object name).
    ``stored``: a name that may name an existing job, which an earlier release may have
    stored under its looser rule."""
    pattern = _STORED_NAME_RE if stored else _NAME_RE
    if (
        not isinstance(value, str)
        or len(value) > limits.MAX_NAME_LENGTH
        or not pattern.fullmatch(value)
    ):
        shown_value = shown(value) if isinstance(value, str) else f"(a {type(value).__name__})"
        raise ValueError(
            f"job name {shown_value} must be a DNS-1123 subdomain (lowercase letters, digits, "
            "'-' and '.', each dot between two letters or digits, starting and ending with "
            f"one; ≤ {limits.MAX_NAME_LENGTH} chars)"
        )
