"""How the dashboard writes values: instants with their zone, durations, states, JSON.

Templates call these; none of them marks text safe, so Jinja escapes all they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

import orjson

from tickwork.core import zones
from tickwork.core.records import Run, State

PAYLOAD_VIEW_BYTES: Final = 16 * 1024

# The colour of a state's badge: what a person should feel about it.
_TONES: Final = {
    State.scheduled: "quiet",
    State.ready: "info",
    State.leased: "info",
    State.retry_wait: "warn",
    State.succeeded: "good",
    State.dead: "bad",
    State.cancelled: "quiet",
    State.discarded: "quiet",
    State.skipped: "warn",
}


def tone(state: str | State | None) -> str:
    if state is None:
        return "quiet"
    try:
        return _TONES[State(state)]
    except ValueError:
        return "quiet"


def zone_of(name: str | None) -> ZoneInfo:
    """The zone ``name`` from tickwork's zone database (UTC for none or an unknown one)."""
    try:
        return zones.get(name or "UTC")
    except zones.UnknownZone:
        return zones.get("UTC")


def iso(instant: datetime | None) -> str:
    """RFC 3339 in UTC, as the API writes instants (for ``<time datetime>``)."""
    if instant is None:
        return ""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def at(instant: datetime | None, zone: str | None = "UTC", seconds: bool = True) -> str:
    """``2026-03-29 03:00:00 CEST``: always with the zone's abbreviation."""
    if instant is None:
        return "—"
    local = instant.astimezone(zone_of(zone))
    text = local.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    return f"{text} {local.tzname()}"


def offset(instant: datetime, zone: str | None) -> str:
    """``UTC+02:00``."""
    value = instant.astimezone(zone_of(zone)).utcoffset() or timedelta(0)
    minutes = int(value.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{rest:02d}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} d {hours % 24} h"


def relative(instant: datetime | None, now: datetime) -> str:
    if instant is None:
        return ""
    delta = (instant - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"


def start_lag(run: Run) -> float | None:
    """Lease time minus ready time of the run's latest lease, while they belong together
    (a retry or a replay moves the ready time on)."""
    if run.leased_at is None or run.leased_at < run.ready_at:
        return None
    return (run.leased_at - run.ready_at).total_seconds()


def run_duration(run: Run, now: datetime) -> tuple[float | None, bool]:
    """Seconds the latest attempt took (or has taken so far: ``True``)."""
    if run.leased_at is None or run.leased_at < run.ready_at:
        return None, False
    if run.state is State.leased:
        return (now - run.leased_at).total_seconds(), True
    if run.finished_at is None:
        return None, False
    return (run.finished_at - run.leased_at).total_seconds(), False


@dataclass(frozen=True, slots=True)
class JsonView:
    text: str
    size: int  # bytes of the compact encoding
    shown: int  # bytes of ``text``
    truncated: bool


def json_view(value: Any, limit: int = PAYLOAD_VIEW_BYTES) -> JsonView:
    """Pretty JSON, cut at ``limit`` bytes (on a character boundary)."""
    compact = orjson.dumps(value)
    pretty = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    if len(pretty) <= limit:
        return JsonView(pretty.decode(), len(compact), len(pretty), False)
    cut = pretty[:limit].decode("utf-8", errors="ignore")
    return JsonView(cut, len(compact), len(cut.encode()), True)


def size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / 1024 / 1024:.1f} MiB"


def error_message(error: Any) -> str:
    """The message of a stored error document, or the document as JSON."""
    if error is None:
        return ""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return orjson.dumps(error).decode()
