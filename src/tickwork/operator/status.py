"""What the operator writes into a ScheduledJob's ``status``, as plain JSON.

Pure functions: the handlers and the status pass compute the status they want, and
``changes`` turns it into the smallest merge patch against what the object holds, so
an object whose status is already right gets no write at all.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from tickwork.core.records import JobStatus

READY: Final = "Ready"

# The fields the status pass owns (refreshed from the database in batches).
RUN_FIELDS: Final = (
    "nextRunTime",
    "lastScheduleTime",
    "lastSuccessfulTime",
    "lastRunState",
    "activeRuns",
    "deadRuns",
    "missedRunsDropped",
    "overlapSkipped",
    "lastJobName",
    "pausedReason",
)


class Reason(enum.StrEnum):
    """Reasons of the Ready condition: True is fine, False needs attention."""

    scheduled = "Scheduled"
    paused = "Paused"
    invalid_spec = "InvalidSpec"
    store_unavailable = "StoreUnavailable"

    @property
    def ready(self) -> bool:
        return self in (Reason.scheduled, Reason.paused)


def timestamp(instant: datetime | None) -> str | None:
    """RFC 3339 in UTC to the second, as Kubernetes writes times (``metav1.Time``)."""
    if instant is None:
        return None
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_ready(
    current: Mapping[str, Any] | None,
    reason: Reason,
    message: str,
    generation: int | None,
    now: datetime,
) -> dict[str, Any]:
    """The status change that sets the Ready condition (``metav1.Condition``) for
    ``generation``; the rest of the status (what the store last held, for the generation
    in ``observedGeneration``) is left as it is. ``lastTransitionTime`` moves only when
    the status flips, as the API conventions ask."""
    status = "True" if reason.ready else "False"
    previous = None
    for held in (current or {}).get("conditions") or []:
        if isinstance(held, Mapping) and held.get("type") == READY:
            previous = held
    transition = timestamp(now)
    if previous is not None and previous.get("status") == status:
        transition = previous.get("lastTransitionTime") or transition
    condition: dict[str, Any] = {
        "type": READY,
        "status": status,
        "reason": reason.value,
        "message": message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return {"conditions": with_condition(current, condition)}


def with_condition(current: Mapping[str, Any] | None, condition: dict[str, Any]) -> list[Any]:
    """The object's conditions with ``condition`` in place of the one of its type."""
    others = [
        c
        for c in (current or {}).get("conditions") or []
        if not (isinstance(c, Mapping) and c.get("type") == condition["type"])
    ]
    return [*others, condition]


def run_fields(status: JobStatus) -> dict[str, Any]:
    """The run-derived fields, from the database (None: the field is absent)."""
    fields: dict[str, Any] = {
        "nextRunTime": timestamp(status.next_run_time),
        "lastScheduleTime": timestamp(status.last_schedule_time),
        "lastSuccessfulTime": timestamp(status.last_successful_time),
        "lastRunState": None if status.last_run_state is None else status.last_run_state.value,
        "activeRuns": status.active_runs,
        "deadRuns": status.dead_runs,
        "missedRunsDropped": status.missed_runs_dropped,
        "overlapSkipped": status.overlap_skipped,
    }
    if status.last_job_name is not None:
        # Kept while a new run waits for its first attempt: the last Job there was.
        fields["lastJobName"] = status.last_job_name
    fields["pausedReason"] = paused_reason(status)
    return fields


def paused_reason(status: JobStatus) -> str | None:
    """Why tickwork keeps the job paused (spec.pauseAfterFailures), or None."""
    if not status.paused or status.paused_reason is None:
        return None
    return status.paused_reason.message(status.shard)


def _stored_reason(status: JobStatus) -> tuple[Reason, str]:
    auto = paused_reason(status)
    if auto is not None:
        return Reason.paused, (
            f"stored in shard {status.shard}; {auto}. Resume it (tickwork jobs resume, "
            "the dashboard) or change the spec"
        )
    if status.paused:
        return Reason.paused, f"stored in shard {status.shard}; paused: no new runs"
    return Reason.scheduled, f"stored in shard {status.shard}"


def paused_conditions(
    current: Mapping[str, Any] | None, status: JobStatus, now: datetime
) -> list[Any] | None:
    """The conditions with Ready rewritten for a pause or resume the status pass saw
    (tickwork paused the job, or it was resumed), or None when nothing changes. Only a
    stored spec's Ready (True) is rewritten: InvalidSpec and StoreUnavailable are the
    handlers' to clear, for the generation they judge."""
    held = None
    for condition in (current or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == READY:
            held = condition
    if held is None or held.get("status") != "True":
        return None
    reason, message = _stored_reason(status)
    if held.get("reason") == reason.value and held.get("message") == message:
        return None
    changed = with_ready(current, reason, message, held.get("observedGeneration"), now)
    return list(changed["conditions"])


def stored(
    current: Mapping[str, Any] | None,
    status: JobStatus,
    generation: int | None,
    now: datetime,
) -> dict[str, Any]:
    """The whole status of an object whose spec is stored: Ready, the generation and
    shard it is stored at, and what its runs say."""
    reason, message = _stored_reason(status)
    return {
        **with_ready(current, reason, message, generation, now),
        "observedGeneration": generation,
        "shard": status.shard,
        **run_fields(status),
    }


def changes(current: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that turns ``current`` into ``wanted`` for ``wanted``'s keys
    (None removes a field); empty when nothing would change."""
    held = current or {}
    patch: dict[str, Any] = {}
    for key, value in wanted.items():
        if value is None:
            if held.get(key) is not None:
                patch[key] = None
        elif held.get(key) != value:
            patch[key] = value
    return patch
