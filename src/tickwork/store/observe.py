"""Reads behind the scheduler's shard metrics: backlog, new dead runs, canary runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.core.records import State
from tickwork.store import queries
from tickwork.store.database import Connection

READY_BACKLOG: Final = queries.get("ready_backlog")
DEAD_BETWEEN: Final = queries.get("dead_between")
CANARY_RUNS_SINCE: Final = queries.get("canary_runs_since")
AUTO_PAUSED_BETWEEN: Final = queries.get("auto_paused_between")
HELD_BACK_RUNS: Final = queries.get("held_back_runs")


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
    rows = await conn.fetch(READY_BACKLOG, now)
    return [
        Backlog(r["tenant"], r["queue"], r["priority"], r["ready"], r["oldest_seconds"])
        for r in rows
    ]


async def dead_between(conn: Connection, after: datetime, until: datetime) -> list[DeadRuns]:
    rows = await conn.fetch(DEAD_BETWEEN, after, until)
    return [DeadRuns(r["tenant"], r["job"], r["priority"], r["dead"]) for r in rows]


async def auto_paused_between(
    conn: Connection, after: datetime, until: datetime
) -> list[tuple[str, str, int]]:
    """``(tenant, job, times)`` of the jobs tickwork paused in ``(after, until]``."""
    rows = await conn.fetch(AUTO_PAUSED_BETWEEN, after, until)
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
    rows = await conn.fetch(HELD_BACK_RUNS, now, tenant, name)
    return [HeldBack(r["tenant"], r["job"], r["limit"], r["runs"]) for r in rows]


async def canary_runs_since(
    conn: Connection, tenant: str, job: str, since: datetime
) -> list[CanaryRun]:
    rows = await conn.fetch(CANARY_RUNS_SINCE, tenant, job, since)
    return [CanaryRun(r["due_at"], State(r["state"]), r["finished_at"]) for r in rows]
