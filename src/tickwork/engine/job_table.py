"""A tenant's jobs as the dashboard's table shows them: filtered, sorted by any column,
one page at a time, with each job's run counts and last run, merged across shards.

Every shard filters and sorts in SQL and returns at most ``offset + limit`` rows; the
merge here applies the same order (C collation, nulls last, names as the tie-break),
so a page is the same whichever shards its jobs live on.
"""

from __future__ import annotations

import asyncio
import enum
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Final

from tickwork.core.records import JobRunSummary, Run
from tickwork.engine.jobs import JobView
from tickwork.store import overview as store
from tickwork.store.database import Database

MAX_OFFSET: Final = 10_000


class Show(enum.StrEnum):
    all = "all"
    paused = "paused"
    active = "active"  # not paused
    running = "running"  # with a leased run
    dead = "dead"  # with runs in the DLQ


class Column(enum.StrEnum):
    name = "name"
    zone = "zone"
    next = "next"
    last = "last"
    paused = "paused"
    active = "active"
    dead = "dead"


@dataclass(frozen=True, slots=True)
class Query:
    contains: str | None = None
    queue: str | None = None
    show: Show = Show.all
    sort: Column = Column.name
    descending: bool = False
    offset: int = 0
    limit: int = 50

    @property
    def sort_key(self) -> str:
        return ("-" if self.descending else "") + self.sort.value


@dataclass(frozen=True, slots=True)
class Page:
    jobs: list[JobView]
    total: int
    query: Query


# The row attribute each column sorts by.
_SORTED_BY: Final[Mapping[Column, Callable[[store.JobRow], Any]]] = {
    Column.name: attrgetter("name"),
    Column.zone: attrgetter("zone"),
    Column.next: attrgetter("next_run_at"),
    Column.last: attrgetter("last_finished_at"),
    Column.paused: attrgetter("paused"),
    Column.active: attrgetter("active"),
    Column.dead: attrgetter("dead"),
}


def _ordered(rows: list[store.JobRow], query: Query) -> list[store.JobRow]:
    """The order of the job_table query: the column (nulls last), then names ascending."""
    rows = sorted(rows, key=lambda row: row.name)
    if query.sort is Column.name:
        return rows[::-1] if query.descending else rows
    value = _SORTED_BY[query.sort]
    present = [row for row in rows if value(row) is not None]
    missing = [row for row in rows if value(row) is None]
    # Stable sorts: equal values keep the names' ascending order, as in SQL.
    present.sort(key=value, reverse=query.descending)
    return present + missing


async def page(database: Database, tenant: str, query: Query) -> Page:
    offset = min(max(query.offset, 0), MAX_OFFSET)
    wanted = offset + query.limit

    async def shard_rows(shard: int) -> list[store.JobRow]:
        async with database.connection(shard) as conn:
            return await store.job_table(
                conn,
                shard,
                tenant,
                contains=query.contains or None,
                queue=query.queue or None,
                show=query.show.value,
                sort=query.sort_key,
                limit=wanted,
            )

    per_shard = await asyncio.gather(*(shard_rows(n) for n in range(database.shard_count)))
    total = sum(rows[0].total for rows in per_shard if rows)
    chosen = _ordered([row for rows in per_shard for row in rows], query)[offset:wanted]
    last_ids: dict[int, list[int]] = defaultdict(list)
    for row in chosen:
        if row.last_id is not None:
            last_ids[row.shard].append(row.last_id)

    async def last_runs(shard: int, ids: list[int]) -> list[Run]:
        async with database.connection(shard) as conn:
            return await store.runs_by_ids(conn, shard, ids)

    found = await asyncio.gather(*(last_runs(shard, ids) for shard, ids in last_ids.items()))
    by_key = {(run.shard, run.id): run for runs in found for run in runs}
    views = [
        JobView(
            row.definition(),
            JobRunSummary(
                active=row.active,
                dead=row.dead,
                last_run=None if row.last_id is None else by_key.get((row.shard, row.last_id)),
                next_scheduled=row.next_scheduled,
            ),
        )
        for row in chosen
    ]
    return Page(views, total, query)
