"""The scheduler's sweeps over one shard: the reaper (expired leases back to
``retry_wait`` or ``dead``), the due flip (``scheduled``/``retry_wait`` to ``ready``)
with the overlap policies of scheduled fires, and the starting-deadline skip.

Each sweep is one single-shard transaction, idempotent, and fenced: given the writer's
``Fence`` it first checks the shard's epoch (``epochs.check``) and writes nothing when
the writer was deposed. The scheduler orchestrates them (``engine.scheduler``); the
retry decision of a reaped lease is the core's (``core.retry``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson

from tickwork.core.records import State
from tickwork.core.shards import format_run_id
from tickwork.core.spec import OverlapPolicy
from tickwork.store import epochs, leases, queries
from tickwork.store.database import Connection
from tickwork.store.runs import notify_ready


class SQL(queries.Statements):
    lock_expired: str
    promote_due: str
    skip_past_deadline: str
    seconds_until_next_due: str
    overlap_due_jobs: str
    lock_overlap_jobs: str
    lock_overlap_fires: str
    replace_running: str
    settle_overlap: str


LEASE_EXPIRED_ERROR: Final = {"message": "lease expired", "reason": "lease-expired"}


@dataclass(frozen=True, slots=True)
class Reaped:
    retried: int
    dead: int
    cancelled: int
    # (tenant, job, priority rank) of each lease taken back: the per-job expiry metric.
    expired: tuple[tuple[str, str, int], ...] = field(default=(), compare=False)

    @property
    def total(self) -> int:
        return self.retried + self.dead + self.cancelled


async def reap(
    conn: Connection,
    limit: int = 1000,
    now: datetime | None = None,
    rng: random.Random | None = None,
    *,
    fence: epochs.Fence | None = None,
) -> Reaped:
    """Take back expired leases: each counts as a failed attempt (``lease-expired``)."""
    async with conn.transaction():
        await epochs.check(conn, fence)
        rows = await conn.fetch(SQL.lock_expired, now, limit)
        if not rows:
            return Reaped(0, 0, 0)
        failures = [
            leases.failure(
                row, dict(LEASE_EXPIRED_ERROR, attempt=row["attempt"]), True, "lease-expired", rng
            )
            for row in rows
        ]
        await leases.record_failures(conn, failures, now)
    states = [f.decision.state for f in failures]
    return Reaped(
        retried=states.count(State.retry_wait),
        dead=states.count(State.dead),
        cancelled=states.count(State.cancelled),
        expired=tuple((row["tenant"], row["job"], row["priority"]) for row in rows),
    )


# The ``reason`` of the error a run ends with when an overlap policy ended it.
OVERLAP_FORBIDDEN: Final = "overlap-forbidden"
OVERLAP_REPLACED: Final = "overlap-replaced"

JobKey = tuple[str, str]  # (tenant, job)


@dataclass(frozen=True, slots=True)
class Overlapped:
    """What the overlap policies did in one due flip, one ``(tenant, job)`` per run."""

    started: tuple[JobKey, ...] = ()
    skipped: tuple[JobKey, ...] = ()  # fires Forbid skipped
    replaced: tuple[JobKey, ...] = ()  # runs Replace stopped: cancelled, or asked to stop


@dataclass(frozen=True, slots=True)
class Promoted:
    ready: int
    skipped: int
    overlap: Overlapped = field(default=Overlapped(), compare=False)


async def promote_due(
    conn: Connection,
    limit: int = 5000,
    now: datetime | None = None,
    *,
    fence: epochs.Fence | None = None,
) -> Promoted:
    """Flip due ``scheduled``/``retry_wait`` runs to ``ready`` and wake their workers.

    Fires of jobs with an overlap policy are decided first (``fire_overlapping``).
    First attempts past their starting deadline end ``skipped`` instead, and so do
    ready first attempts that nobody leased in time.
    """
    async with conn.transaction():
        await epochs.check(conn, fence)
        # Before any row lock of the flip: the overlap step waits on job locks, and a
        # flip holding rows while it waits could deadlock with another one.
        overlap, overlap_queues = await fire_overlapping(conn, limit, now)
        rows = await conn.fetch(SQL.promote_due, limit, now)
        late = await conn.fetch(SQL.skip_past_deadline, limit, now)
        ready_queues = [row["queue"] for row in rows if row["state"] == State.ready.value]
        await notify_ready(conn, ready_queues + overlap_queues)
    skipped = len(rows) - len(ready_queues) + len(late) + len(overlap.skipped)
    return Promoted(
        ready=len(ready_queues) + len(overlap.started), skipped=skipped, overlap=overlap
    )


@dataclass(frozen=True, slots=True)
class _Fire:
    tenant: str
    job: str
    id: int
    policy: OverlapPolicy
    due_at: datetime
    shard: int


@dataclass
class _Decisions:
    start: list[int] = field(default_factory=list)
    # (run id, state it ends in, error) of fires that end now
    end: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    # (tenant, job, error): jobs whose running runs Replace stops
    replace: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    started: list[JobKey] = field(default_factory=list)
    skipped: list[JobKey] = field(default_factory=list)
    replaced: list[JobKey] = field(default_factory=list)


def _decide_fires(
    fires: Sequence[_Fire], running: tuple[int, str] | None, decisions: _Decisions
) -> None:
    """The fires of one job, oldest first, taken one after the other as if each came at
    its own time: ``running`` is the job's run that is ready, leased or waiting to retry
    (its id and state), or None. Forbid skips a fire while a run is running; Replace
    stops the running run (a fire of this batch is cancelled, an older run is asked to
    stop) and starts; either way a fire that starts is what runs for the next."""
    started: _Fire | None = None
    for fire in fires:
        key = (fire.tenant, fire.job)
        if fire.policy is OverlapPolicy.Forbid:
            message = None
            if started is not None:
                message = (
                    f"skipped: run {_name(fire, started.id)} of the job, due "
                    f"{started.due_at.isoformat()}, started instead (overlapPolicy Forbid)"
                )
            elif running is not None:
                message = (
                    f"skipped: run {_name(fire, running[0])} of the job was still "
                    f"{running[1]} (overlapPolicy Forbid)"
                )
            if message is not None:
                decisions.end.append(
                    (fire.id, State.skipped.value, _error(message, OVERLAP_FORBIDDEN))
                )
                decisions.skipped.append(key)
                continue
        else:
            error = _error(
                f"cancelled: replaced by run {_name(fire, fire.id)}, due "
                f"{fire.due_at.isoformat()} (overlapPolicy Replace)",
                OVERLAP_REPLACED,
            )
            if started is not None:
                decisions.start.remove(started.id)
                decisions.started.remove(key)
                decisions.end.append((started.id, State.cancelled.value, error))
                decisions.replaced.append(key)
            elif running is not None:
                decisions.replace.append((fire.tenant, fire.job, error))
                running = None
        decisions.start.append(fire.id)
        decisions.started.append(key)
        started = fire


def _name(fire: _Fire, run_id: int) -> str:
    return format_run_id(fire.shard, run_id)


def _error(message: str, reason: str) -> dict[str, Any]:
    return {"message": message, "reason": reason}


def _json(value: dict[str, Any]) -> str:
    return orjson.dumps(value).decode()


async def fire_overlapping(
    conn: Connection, limit: int, now: datetime | None
) -> tuple[Overlapped, list[str]]:
    """Decide the due fires of jobs whose overlap policy is Forbid or Replace (in the
    caller's transaction): each job locked, then its fires and its running run read
    afresh, so two flips never both start a fire of one job. Returns what was done and
    the queues of the fires that became ready."""
    jobs = await conn.fetch(SQL.overlap_due_jobs, limit, now)
    if not jobs:
        return Overlapped(), []
    tenants = [row["tenant"] for row in jobs]
    names = [row["job"] for row in jobs]
    # In the statement's order (tenant, then job), the same in every flip: no cycle of
    # waits between two of them.
    keys = [f"{tenant}/{name}" for tenant, name in zip(tenants, names, strict=True)]
    await conn.execute(SQL.lock_overlap_jobs, keys)
    rows = await conn.fetch(SQL.lock_overlap_fires, tenants, names, now)
    decisions = _Decisions()
    # The rows come grouped by job, oldest fire first; the running run is the job's.
    for _, group in itertools.groupby(rows, key=lambda r: (r["tenant"], r["job"])):
        held = list(group)
        fires = [
            _Fire(
                r["tenant"], r["job"], r["id"], OverlapPolicy(r["overlap"]), r["due_at"], r["shard"]
            )
            for r in held
        ]
        first = held[0]
        running = (
            None if first["running_id"] is None else (first["running_id"], first["running_state"])
        )
        _decide_fires(fires, running, decisions)
    if decisions.replace:
        stopped = await conn.fetch(
            SQL.replace_running,
            [t for t, _, _ in decisions.replace],
            [j for _, j, _ in decisions.replace],
            [_json(e) for _, _, e in decisions.replace],
            now,
        )
        errors = {(t, j): e for t, j, e in decisions.replace}
        for run in stopped:
            key = (run["tenant"], run["job"])
            decisions.replaced.append(key)
            if run["state"] != State.leased.value:  # not leased: it ends now
                decisions.end.append((run["id"], State.cancelled.value, errors[key]))
    settled = await conn.fetch(
        SQL.settle_overlap,
        decisions.start,
        [run_id for run_id, _, _ in decisions.end],
        [state for _, state, _ in decisions.end],
        [_json(error) for _, _, error in decisions.end],
        now,
    )
    queues = [row["queue"] for row in settled if row["state"] == State.ready.value]
    done = Overlapped(tuple(decisions.started), tuple(decisions.skipped), tuple(decisions.replaced))
    return done, queues


async def seconds_until_next_due(conn: Connection, now: datetime | None = None) -> float | None:
    """Seconds until the earliest scheduled or retry-waiting run is due (None: none)."""
    seconds = await conn.fetchval(SQL.seconds_until_next_due, now)
    return None if seconds is None else float(seconds)
