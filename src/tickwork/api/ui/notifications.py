"""What the notifications page reads: the notifications delivered lately and those
still being delivered, as the page shows them.

A delivered notification is an audit entry (``action: notify``) of the job it is about;
one still being delivered is a live run of the system job ``tickwork.notify``, on the
shard of the run it is about (so every shard is read, as a job pattern does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.core.operations import Filter
from tickwork.core.records import AuditEntry, Run, State
from tickwork.core.spec import NOTIFY_JOB
from tickwork.engine import audit
from tickwork.engine.installation import Installation
from tickwork.engine.notifications import Target
from tickwork.engine.operations import Operations

RECENT: Final = 25
PENDING: Final = 25
_PENDING: Final = Filter(
    job_pattern=NOTIFY_JOB, states=(State.ready, State.leased, State.retry_wait)
)
_EVENT_TONES: Final = {
    "dead": "bad",
    "autoPaused": "warn",
    "deadlineMissed": "bad",
    "leasedTooLong": "warn",
}


@dataclass(frozen=True, slots=True)
class Delivery:
    """A notification a receiver took (a 2xx), as its audit entry tells it."""

    at: datetime
    job: str
    event: str
    target: str
    key: str
    run_id: str | None  # the delivery run's
    attempt: int | None

    @classmethod
    def of(cls, entry: AuditEntry) -> Delivery:
        detail = entry.detail if isinstance(entry.detail, dict) else {}
        attempt = detail.get("attempt")
        return cls(
            entry.at,
            entry.job,
            str(detail.get("event") or ""),
            str(detail.get("target") or ""),
            str(detail.get("idempotencyKey") or ""),
            detail.get("deliveryRunId") or entry.public_run_id,
            attempt if isinstance(attempt, int) else None,
        )


@dataclass(frozen=True, slots=True)
class Pending:
    """A notification not delivered yet: its run, and what the run carries."""

    run: Run
    job: str
    event: str
    target: str


def event_tone(event: str) -> str:
    return _EVENT_TONES.get(event, "info")


def signing(target: Target) -> tuple[str, str] | None:
    """Where the scheduler reads the target's key (``env`` or ``file``, and the name),
    None when bodies are not signed: the reference only, as the API shows it."""
    ref = target.secret_ref or {}
    for kind in ("env", "file"):
        if ref.get(kind):
            return kind, ref[kind]
    return None


async def deliveries(engine: Installation, tenant: str) -> list[Delivery]:
    """The tenant's ``RECENT`` newest deliveries, from every shard."""
    return [
        Delivery.of(entry) for entry in await audit.notifications(engine.database, tenant, RECENT)
    ]


async def pending(operations: Operations, tenant: str) -> list[Pending]:
    """The newest ``PENDING`` notifications not delivered yet (due latest first)."""
    runs, _ = await operations.runs(tenant, _PENDING, None, PENDING)
    return [_pending(run) for run in runs]


def _pending(run: Run) -> Pending:
    carried = run.payload if isinstance(run.payload, dict) else {}
    return Pending(
        run,
        str(carried.get("job") or ""),
        str(carried.get("event") or ""),
        str(carried.get("target") or ""),
    )
