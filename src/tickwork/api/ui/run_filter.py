"""A filter of runs as the dashboard's pages and forms carry it: read from a query or
a form with the checks the API makes (``core.operations.checked``), written back as
the form's fields, and said in words for a confirmation.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from fastapi import Request

from tickwork.api.access import Operation
from tickwork.api.services import services
from tickwork.api.ui import web
from tickwork.core import operations as core
from tickwork.core.errors import Forbidden, InvalidRequest
from tickwork.core.records import State
from tickwork.engine import operations as engine

DEFAULT_STATE: Final = State.dead.value
# What the form's time fields hold: a datetime-local input's value, read as UTC.
LOCAL_FORMAT: Final = "%Y-%m-%dT%H:%M:%S"
VERBS: Final = {
    core.Action.replay: ("Replay", "Replayed"),
    core.Action.discard: ("Discard", "Discarded"),
    core.Action.cancel: ("Cancel", "Cancelled"),
}
# The query fields of a filter, in the order the form and the confirmation show them.
FIELDS: Final = ("state", "job", "from", "to", "errorContains", "minAttempts", "maxAttempts")


def _text(source: Mapping[str, str], name: str) -> str | None:
    return (source.get(name) or "").strip() or None


def _instant(text: str | None, field: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(
            f"{field}: {text!r} is not a date and time (2026-03-15T02:00:00, UTC)", field=field
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _number(text: str | None, field: str) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidRequest(f"{field} must be a whole number, not {text!r}", field=field) from None


def read_filter(
    source: Mapping[str, str], action: core.Action | None = None
) -> tuple[core.Filter, dict[str, str]]:
    """The filter a page's query or a form gives, checked as the API checks it, and its
    fields as the form and the links carry them. ``job`` with ``*`` or ``?`` is a
    pattern (``jobPattern`` is taken too, as the API names it)."""
    job = _text(source, "job")
    pattern = _text(source, "jobPattern")
    if job is not None and pattern is None and ("*" in job or "?" in job):
        job, pattern = None, job
    state = _text(source, "state") or (DEFAULT_STATE if action is None else None)
    from_ = _instant(_text(source, "from"), "from")
    to = _instant(_text(source, "to"), "to")
    found = core.checked(
        job=job,
        job_pattern=pattern,
        state=state,
        from_=from_,
        to=to,
        error_contains=_text(source, "errorContains"),
        min_attempts=_number(_text(source, "minAttempts"), "minAttempts"),
        max_attempts=_number(_text(source, "maxAttempts"), "maxAttempts"),
        action=action,
    )
    return found, params_of(found)


def params_of(found: core.Filter) -> dict[str, str]:
    """The filter's query fields (none left out by ``found`` is written)."""
    values = {
        "state": found.states[0].value if len(found.states) == 1 else None,
        "job": found.job or found.job_pattern,
        "from": None if found.from_ is None else found.from_.strftime(LOCAL_FORMAT),
        "to": None if found.to is None else found.to.strftime(LOCAL_FORMAT),
        "errorContains": found.error_contains,
        "minAttempts": None if found.min_attempts is None else str(found.min_attempts),
        "maxAttempts": None if found.max_attempts is None else str(found.max_attempts),
    }
    return {key: value for key, value in values.items() if value is not None}


def described(found: core.Filter, action: core.Action | None = None) -> list[tuple[str, str]]:
    """The filter in words, one (label, value) a line, for the confirmation and the
    operation's page."""
    states = found.states or (action.states() if action is not None else ())
    if found.finished:
        since, before = ("Died at or after", "Died before")
        if states != (State.dead,):
            since, before = ("Finished at or after", "Finished before")
    else:
        since, before = ("Due at or after", "Due before")
    lines = [("State", " or ".join(s.value.replace("_", " ") for s in states) or "any")]
    if found.job is not None:
        lines.append(("Job", found.job))
    elif found.job_pattern is not None:
        lines.append(("Jobs named like", found.job_pattern))
    else:
        lines.append(("Jobs", "every job of the tenant"))
    if found.from_ is not None:
        lines.append((since, found.from_.strftime("%Y-%m-%d %H:%M:%S UTC")))
    if found.to is not None:
        lines.append((before, found.to.strftime("%Y-%m-%d %H:%M:%S UTC")))
    if found.error_contains is not None:
        lines.append(("Last error contains", found.error_contains))
    if found.min_attempts is not None:
        lines.append(("Attempts at least", str(found.min_attempts)))
    if found.max_attempts is not None:
        lines.append(("Attempts at most", str(found.max_attempts)))
    return lines


def actions_for(found: core.Filter) -> list[core.Action]:
    """What may be done to every run the filter (of one state) picks."""
    if found.states == (State.dead,):
        return [core.Action.replay, core.Action.discard]
    if found.states and all(s in core.CANCELLABLE for s in found.states):
        return [core.Action.cancel]
    return []


def operations_of(request: Request) -> engine.Operations:
    return services(request).operations


async def matching(request: Request, tenant: str, found: core.Filter) -> int | None:
    """How many runs match now (None for finished states but dead: nothing acts on
    them, and they are not counted)."""
    possible = actions_for(found)
    if not possible:
        return None
    return await operations_of(request).count(tenant, possible[0], found)


async def dead_matching(
    request: Request,
    who: web.Viewer,
    job: str | None,
    since: datetime | None,
    until: datetime | None,
) -> tuple[int, dict[str, str]] | None:
    """For the DLQ page: how many dead runs its filter matches across every page, and
    the filter's fields for the bulk forms (None when no bulk operation can be made)."""
    try:
        await web.allow(who, Operation.create_operation)
        found = core.checked(job=job, state=State.dead.value, from_=since, to=until)
    except (InvalidRequest, Forbidden):
        return None
    total = await operations_of(request).count(who.tenant, core.Action.replay, found)
    return total, params_of(found)
