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


async def canary_runs_since(
    conn: Connection, tenant: str, job: str, since: datetime
) -> list[CanaryRun]:
    rows = await conn.fetch(CANARY_RUNS_SINCE, tenant, job, since)
    return [CanaryRun(r["due_at"], State(r["state"]), r["finished_at"]) for r in rows]
