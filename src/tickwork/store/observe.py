"""Reads behind the scheduler's shard metrics: backlog, new dead runs, canary runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwork.core.records import State
from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    ready_backlog: str
    dead_between: str
    canary_runs_since: str
    auto_paused_between: str
    held_back_runs: str


@dataclass(frozen=True, slots=True)
class Backlog:
    tenant: str
    queue: str
    priority: int
    ready: int
    oldest_seconds: float


@dataclass(frozen=True, slots=True)
class DeadRuns:
    tenant: str
    job: str
    priority: int
    count: int


@dataclass(frozen=True, slots=True)
class CanaryRun:
    due_at: datetime
    state: State
    finished_at: datetime | None


async def ready_backlog(conn: Connection, now: datetime | None = None) -> list[Backlog]:
    rows = await conn.fetch(SQL.ready_backlog, now)
    return [
        Backlog(r["tenant"], r["queue"], r["priority"], r["ready"], r["oldest_seconds"])
        for r in rows
    ]


async def dead_between(conn: Connection, after: datetime, until: datetime) -> list[DeadRuns]:
    rows = await conn.fetch(SQL.dead_between, after, until)
    return [DeadRuns(r["tenant"], r["job"], r["priority"], r["dead"]) for r in rows]


async def auto_paused_between(
    conn: Connection, after: datetime, until: datetime
) -> list[tuple[str, str, int]]:
    """``(tenant, job, times)`` of the jobs tickwork paused in ``(after, until]``."""
    rows = await conn.fetch(SQL.auto_paused_between, after, until)
    return [(r["tenant"], r["job"], r["paused"]) for r in rows]


@dataclass(frozen=True, slots=True)
class HeldBack:
    """Ready runs of a job its flow control holds back now, by the limit that does."""

    tenant: str
    job: str
    limit: str  # concurrency, rate
    runs: int


async def held_back(
    conn: Connection, now: datetime | None = None, job: tuple[str, str] | None = None
) -> list[HeldBack]:
    """The shard's held-back runs per job and limit (of ``job`` = (tenant, name) only,
    if given): those whose concurrency bucket is full or whose rate window is used up."""
    tenant, name = job if job is not None else (None, None)
    rows = await conn.fetch(SQL.held_back_runs, now, tenant, name)
    return [HeldBack(r["tenant"], r["job"], r["limit"], r["runs"]) for r in rows]


async def canary_runs_since(
    conn: Connection, tenant: str, job: str, since: datetime
) -> list[CanaryRun]:
    rows = await conn.fetch(SQL.canary_runs_since, tenant, job, since)
    return [CanaryRun(r["due_at"], State(r["state"]), r["finished_at"]) for r in rows]
