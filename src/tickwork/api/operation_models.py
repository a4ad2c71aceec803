"""Request and response models of bulk operations (``/v1/operations``) and of runs by
filter across jobs (``GET /v1/runs``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

from tickwork.api.models import NAME_SCHEMA, Model
from tickwork.core import limits, operations, spec
from tickwork.core.records import State
from tickwork.core.spec import Instant

GLOB_SCHEMA: Final[dict[str, Any]] = {
    "pattern": r"^[a-z0-9.*?-]+$",
    "minLength": 1,
    "maxLength": limits.MAX_NAME_LENGTH,
}
# job and jobPattern: at most one of the two.
_ONE_OF_JOB: Final[dict[str, Any]] = {"not": {"required": ["job", "jobPattern"]}}

Action = Literal["replay", "discard", "cancel"]
OperationState = Literal["running", "done", "cancelled"]


class OperationFilter(Model):
    """Which runs of the tenant: a field left out matches every run. Replay and
    discard act on dead runs; cancel on runs not finished (a leased run is asked to
    stop). Times are on `finishedAt` for finished (dead) runs and on `dueAt` for the
    others; `from` inclusive, `to` exclusive."""

    model_config = ConfigDict(json_schema_extra=_ONE_OF_JOB)

    job: StrictStr | None = Field(default=None, json_schema_extra=NAME_SCHEMA)
    job_pattern: StrictStr | None = Field(
        default=None,
        description="A glob over job names: `*` any characters, `?` one (`export-*`). "
        "Not with `job`.",
        json_schema_extra=GLOB_SCHEMA,
    )
    state: StrictStr | None = Field(
        default=None,
        json_schema_extra={"enum": [state.value for state in State]},
        description="replay, discard: `dead` (the default). cancel: `scheduled`, `ready`, "
        "`retry_wait` or `leased`; left out, all four.",
    )
    from_: Instant | None = Field(default=None, alias="from")
    to: Instant | None = None
    error_contains: StrictStr | None = Field(
        default=None,
        min_length=1,
        max_length=operations.MAX_ERROR_TEXT,
        description="A case-insensitive substring of the last error's message.",
    )
    min_attempts: StrictInt | None = Field(default=None, ge=0, le=operations.MAX_ATTEMPTS)
    max_attempts: StrictInt | None = Field(default=None, ge=0, le=operations.MAX_ATTEMPTS)

    @field_validator("from_", "to")
    @classmethod
    def _instant(cls, value: datetime | None) -> datetime | None:
        return spec.check_instant(value)


class OperationRequest(Model):
    action: Action
    filter: OperationFilter = Field(default_factory=OperationFilter)
    dry_run: StrictBool = Field(
        default=False,
        description="true: answer how many runs match now (200), and change nothing.",
    )


class OperationCount(Model):
    dry_run: Literal[True]
    action: Action
    filter: OperationFilter
    total: int = Field(description="The runs the operation would act on now.")


class OperationShard(Model):
    shard: int
    state: OperationState
    total: int
    processed: int


class Operation(Model):
    id: str = Field(examples=["op-5f0c2a9e41d7b3c8"])
    tenant: str
    action: Action
    filter: OperationFilter
    state: OperationState
    total: int = Field(description="The runs that matched when the operation was made.")
    processed: int = Field(description="The runs acted on so far.")
    percent: int = Field(ge=0, le=100, description="100 once done.")
    actor: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    shards: list[OperationShard]


class OperationPage(Model):
    items: list[Operation]
