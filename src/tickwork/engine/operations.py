"""Bulk operations across shards: replay, discard or cancel every run of a tenant that
matches a filter, as an asynchronous operation.

Making one counts the matching runs of every shard and writes the operation's row in
each (the same id everywhere), then records one audit entry with the filter and the
count. The runs are acted on by the scheduler of each shard (``work``, a step of its
pass), a few batches per pass, each its own short transaction (``store.operations``):
the progress is the sum of the shards' rows.
"""

from __future__ import annotations

import heapq
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.errors import NotFound
from tickwork.core.operations import Action, Filter, OperationFields, OperationState
from tickwork.core.records import Run
from tickwork.engine.cursors import Position
from tickwork.store import epochs, runs
from tickwork.store import operations as store
from tickwork.store.database import Connection, Database

# Per scheduler pass and shard: batches go on while this many seconds have not passed,
# so one large operation never holds a shard's pass (its due flips, its reaping) up.
DEFAULT_BUDGET_SECONDS: Final = 0.25
DEFAULT_BATCH: Final = store.DEFAULT_BATCH
AUDIT_ACTIONS: Final = {action: f"bulk-{action.value}" for action in Action}


@dataclass(frozen=True, slots=True)
class Operation(OperationFields):
    """An operation as a caller sees it: its shards' rows summed."""

    shards: tuple[store.ShardOperation, ...]

    @property
    def percent(self) -> int:
        """How far it got; 100 once every shard is done."""
        if self.state is OperationState.done or self.total == 0:
            return 100 if self.state is OperationState.done else 0
        return min(99, self.processed * 100 // self.total)

    @classmethod
    def of(cls, rows: list[store.ShardOperation]) -> Operation:
        first = rows[0]
        states = {row.state for row in rows}
        if OperationState.running in states:
            state = OperationState.running
        elif OperationState.cancelled in states:
            state = OperationState.cancelled
        else:
            state = OperationState.done
        finished = [row.finished_at for row in rows if row.finished_at is not None]
        return cls(
            id=first.id,
            tenant=first.tenant,
            action=first.action,
            filter=first.filter,
            state=state,
            total=sum(row.total for row in rows),
            processed=sum(row.processed for row in rows),
            actor=first.actor,
            created_at=min(row.created_at for row in rows),
            updated_at=max(row.updated_at for row in rows),
            finished_at=None if state is OperationState.running else max(finished),
            shards=tuple(sorted(rows, key=lambda row: row.shard)),
        )


def new_id() -> str:
    return "op-" + secrets.token_hex(8)


class Operations:
    def __init__(self, database: Database, clock: Clock | None = None) -> None:
        self.database = database
        self.clock = clock or DatabaseClock()

    async def count(self, tenant: str, action: Action, found: Filter) -> int:
        """How many runs the operation would act on now (a dry run)."""
        total = 0
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                total += await store.count(conn, tenant, action, found, self.clock.now())
        return total

    async def create(self, tenant: str, action: Action, found: Filter, actor: str) -> Operation:
        """Make the operation in every shard, then audit it once (in the shard of the
        job it is filed under, where the job's audit entries are)."""
        operation_id = new_id()
        total = 0
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                total += await store.create(
                    conn, operation_id, tenant, action, found, actor, self.clock.now()
                )
        label = found.job_label
        async with self.database.connection(
            self.database.shard_map.shard_of(tenant, label)
        ) as conn:
            detail = {"operation": operation_id, "filter": found.document(), "total": total}
            await runs.audit(
                conn, tenant, label, None, AUDIT_ACTIONS[action], actor, detail, self.clock.now()
            )
        return await self.get(tenant, operation_id)

    async def get(self, tenant: str, operation_id: str) -> Operation:
        rows: list[store.ShardOperation] = []
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                found = await store.get(conn, shard, operation_id, tenant)
            if found is not None:
                rows.append(found)
        if not rows:
            raise NotFound(f"no operation {operation_id!r}", field="operationId")
        return Operation.of(rows)

    async def recent(self, tenant: str, limit: int) -> list[Operation]:
        """The tenant's newest operations, newest first."""
        by_id: dict[str, list[store.ShardOperation]] = {}
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                for row in await store.recent(conn, shard, tenant, limit):
                    by_id.setdefault(row.id, []).append(row)
        found = [Operation.of(rows) for rows in by_id.values()]
        found.sort(key=lambda op: (op.created_at, op.id), reverse=True)
        return found[:limit]

    async def cancel(self, tenant: str, operation_id: str) -> Operation:
        """Stop the operation: what its batches did stays done."""
        await self.get(tenant, operation_id)  # NotFound before anything changes
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                await store.cancel(conn, operation_id, tenant, self.clock.now())
        return await self.get(tenant, operation_id)

    async def runs(
        self, tenant: str, found: Filter, cursor: Position | None, limit: int
    ) -> tuple[list[Run], Position | None]:
        """A page of the tenant's runs matching ``found`` (of one state) across jobs,
        newest first by the instant the filter's time range is on, merged across
        shards (only the job's shard with ``job``)."""
        numbers = (
            range(self.database.shard_count)
            if found.job is None
            else [self.database.shard_map.shard_of(tenant, found.job)]
        )
        per_shard: list[list[Run]] = []
        for shard in numbers:
            before = None if cursor is None else cursor.bound_for(shard)
            async with self.database.connection(shard) as conn:
                per_shard.append(
                    await store.matching_runs(conn, shard, tenant, found, before, limit + 1)
                )
        order = _finished_order if found.finished else _due_order
        merged = list(heapq.merge(*per_shard, key=order, reverse=True))
        page = merged[:limit]
        if len(merged) > limit and page:
            at, shard, local = order(page[-1])
            return page, Position(at, shard, local)
        return page, None


def _finished_order(run: Run) -> tuple[datetime, int, int]:
    assert run.finished_at is not None
    return (run.finished_at, run.shard, run.id)


def _due_order(run: Run) -> tuple[datetime, int, int]:
    return (run.due_at, run.shard, run.id)


@dataclass
class Worked:
    """What a scheduler pass did for the operations of one shard."""

    acted: int = 0
    # Work is left for the next pass (the time budget ran out first).
    more: bool = False


async def work(
    conn: Connection,
    now: datetime | None = None,
    *,
    fence: epochs.Fence | None = None,
    batch: int = DEFAULT_BATCH,
    budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    before_batch: Callable[[], None] | None = None,
) -> Worked:
    """The scheduler's step: batches of the shard's running operations, oldest first,
    while the time budget lasts."""
    worked = Worked()
    ids = await store.running(conn)
    if not ids:
        return worked
    until = time.monotonic() + budget_seconds
    for operation_id in ids:
        while True:
            if time.monotonic() >= until:
                worked.more = True
                return worked
            if before_batch is not None:
                before_batch()
            done = await store.work_batch(conn, operation_id, batch, now, fence=fence)
            worked.acted += done.acted
            if done.finished:
                break
    return worked
