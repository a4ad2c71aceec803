"""Bulk operations on runs: the filter that picks the runs, and what is done to them.

A filter is within one tenant (the caller's) and names runs by job (exactly, or by a
glob such as ``export-*``), by state, by time, by the text of their last error and by
their attempt count. Replay and discard act on dead runs only; cancel on runs not
finished (scheduled, ready, retry_wait, leased: a leased run is asked to stop, as a
single cancel does).

The time range is on the instant a run's state is about: a finished run's
``finishedAt`` (for a dead run, when it died: "the runs that died during the outage"),
a run not finished yet its ``dueAt``. ``from`` is inclusive, ``to`` exclusive.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from tickwork.core import limits
from tickwork.core.errors import InvalidRequest
from tickwork.core.records import PENDING, State
from tickwork.core.spec import check_name

MAX_ERROR_TEXT: Final = 200
MAX_ATTEMPTS: Final = 1_000_000
# A glob's characters: a name's, and the two wildcards.
_GLOB_RE: Final = re.compile(r"^[a-z0-9.*?-]+$")
FINISHED_STATES: Final = frozenset(
    {State.succeeded, State.dead, State.cancelled, State.discarded, State.skipped}
)
CANCELLABLE: Final = (*sorted(PENDING, key=lambda s: s.value), State.leased)


class Action(enum.StrEnum):
    replay = "replay"
    discard = "discard"
    cancel = "cancel"

    def states(self) -> tuple[State, ...]:
        """The states a run must be in for this action to act on it."""
        return CANCELLABLE if self is Action.cancel else (State.dead,)


class OperationState(enum.StrEnum):
    running = "running"
    done = "done"
    cancelled = "cancelled"


@dataclass(frozen=True, slots=True)
class Filter:
    """Which runs of a tenant: every field left out matches every run."""

    job: str | None = None
    job_pattern: str | None = None
    states: tuple[State, ...] = ()
    from_: datetime | None = None
    to: datetime | None = None
    error_contains: str | None = None
    min_attempts: int | None = None
    max_attempts: int | None = None

    @property
    def like(self) -> str | None:
        """``job_pattern`` as a LIKE pattern (``\\`` escapes, the default of LIKE)."""
        if self.job_pattern is None:
            return None
        escaped = re.sub(r"([\\%_])", r"\\\1", self.job_pattern)
        return escaped.replace("*", "%").replace("?", "_")

    @property
    def job_label(self) -> str:
        """What the audit entry is filed under: the job, the pattern, or ``*``."""
        return self.job or self.job_pattern or "*"

    @property
    def finished(self) -> bool:
        """Whether the filter is on finished runs (they all are, or none is)."""
        return bool(self.states) and self.states[0] in FINISHED_STATES

    def document(self) -> dict[str, Any]:
        """The filter as the API writes it (fields left out when not set; several
        states, a cancel's default, are every state the action acts on)."""
        found: dict[str, Any] = {
            "job": self.job,
            "jobPattern": self.job_pattern,
            "state": None,
            "from": None if self.from_ is None else self.from_.isoformat(),
            "to": None if self.to is None else self.to.isoformat(),
            "errorContains": self.error_contains,
            "minAttempts": self.min_attempts,
            "maxAttempts": self.max_attempts,
        }
        if len(self.states) == 1:
            found["state"] = self.states[0].value
        return {key: value for key, value in found.items() if value is not None}

    @classmethod
    def from_document(cls, document: dict[str, Any], action: Action) -> Filter:
        """The filter of ``action`` stored by ``document`` (trusted: it was checked
        when stored)."""
        state = document.get("state")
        return cls(
            job=document.get("job"),
            job_pattern=document.get("jobPattern"),
            states=action.states() if state is None else (State(state),),
            from_=_instant(document.get("from")),
            to=_instant(document.get("to")),
            error_contains=document.get("errorContains"),
            min_attempts=document.get("minAttempts"),
            max_attempts=document.get("maxAttempts"),
        )


def _instant(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def checked(
    *,
    job: str | None = None,
    job_pattern: str | None = None,
    state: str | None = None,
    from_: datetime | None = None,
    to: datetime | None = None,
    error_contains: str | None = None,
    min_attempts: int | None = None,
    max_attempts: int | None = None,
    action: Action | None = None,
    prefix: str = "",
) -> Filter:
    """A filter from what a caller gave, each field checked (``InvalidRequest`` naming
    it, after ``prefix``: ``filter.``). With ``action``, ``state`` must be one the
    action acts on, and when left out is every such state; without, a state is needed
    (a list of runs is of one state)."""
    if job is not None:
        try:
            check_name(job, stored=True)
        except ValueError as error:
            raise InvalidRequest(str(error), field=f"{prefix}job") from error
    if job_pattern is not None:
        if job is not None:
            raise InvalidRequest("give job or jobPattern, not both", field=f"{prefix}jobPattern")
        if not 1 <= len(job_pattern) <= limits.MAX_NAME_LENGTH or not _GLOB_RE.fullmatch(
            job_pattern
        ):
            raise InvalidRequest(
                "jobPattern must be a job name in which * stands for any characters and ? "
                f"for one (lowercase letters, digits, '-', '.'; ≤ {limits.MAX_NAME_LENGTH})",
                field=f"{prefix}jobPattern",
            )
    states = _states(state, action, prefix)
    if from_ is not None and to is not None and from_ >= to:
        raise InvalidRequest("from must be before to", field=f"{prefix}to")
    if error_contains is not None and not 1 <= len(error_contains) <= MAX_ERROR_TEXT:
        raise InvalidRequest(
            f"errorContains must be 1 to {MAX_ERROR_TEXT} characters",
            field=f"{prefix}errorContains",
        )
    for name, value in (("minAttempts", min_attempts), ("maxAttempts", max_attempts)):
        if value is not None and not 0 <= value <= MAX_ATTEMPTS:
            raise InvalidRequest(f"{name} must be 0 to {MAX_ATTEMPTS}", field=f"{prefix}{name}")
    if min_attempts is not None and max_attempts is not None and min_attempts > max_attempts:
        raise InvalidRequest(
            "minAttempts must not be above maxAttempts", field=f"{prefix}maxAttempts"
        )
    return Filter(
        job=job,
        job_pattern=job_pattern,
        states=states,
        from_=from_,
        to=to,
        error_contains=error_contains,
        min_attempts=min_attempts,
        max_attempts=max_attempts,
    )


def _states(state: str | None, action: Action | None, prefix: str) -> tuple[State, ...]:
    field = f"{prefix}state"
    if state is None:
        if action is None:
            raise InvalidRequest("state is required", field=field)
        return action.states()
    try:
        found = State(state)
    except ValueError:
        raise InvalidRequest(
            f"state must be one of {', '.join(s.value for s in State)}", field=field
        ) from None
    if action is not None and found not in action.states():
        allowed = ", ".join(s.value for s in action.states())
        raise InvalidRequest(f"{action.value} acts on runs that are {allowed}", field=field)
    return (found,)


@dataclass(frozen=True, slots=True)
class OperationFields:
    """What an operation is: in one shard (its row there) or summed over its shards."""

    id: str
    tenant: str
    action: Action
    filter: Filter
    state: OperationState
    total: int
    processed: int
    actor: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
