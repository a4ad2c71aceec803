"""Bulk operations in one shard: the operation's row, the runs its filter picks, and
the batches that act on them.

A batch is one short transaction: it checks the scheduler's epoch, locks the
operation's row (a cancel waits for the batch in flight, never longer), picks the
next runs past the row's cursor, acts on each with the statements the single replay,
discard and cancel use (their per-run audit entries aside: a bulk operation is audited
once, when it is made) and moves the cursor and the count on. A batch that did not
commit did nothing, so an operation interrupted anywhere (its scheduler killed, the
shard taken over) resumes where its last batch ended, and no run is acted on twice:
each run is passed by the cursor exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

import orjson

from tickwork.core.operations import Action, Filter, OperationFields, OperationState
from tickwork.core.records import Row, Run, State
from tickwork.store import clock, epochs, queries, runs
from tickwork.store.database import Connection


class SQL(queries.Statements):
    count_dead_matching: str
    count_live_matching: str
    next_dead_batch: str
    next_live_batch: str
    finished_runs_matching: str
    live_runs_matching: str
    insert_operation: str
    operation_by_id: str
    lock_operation: str
    running_operations: str
    recent_operations: str
    advance_operation: str
    cancel_operation: str
    replay_dead: str
    discard_dead: str


DEFAULT_BATCH: Final = 500


@dataclass(frozen=True, slots=True)
class ShardOperation(OperationFields):
    """An operation's row in one shard."""

    shard: int

    @classmethod
    def from_record(cls, shard: int, row: Row) -> ShardOperation:
        action = Action(row["action"])
        return cls(
            shard=shard,
            id=row["id"],
            tenant=row["tenant"],
            action=action,
            filter=Filter.from_document(orjson.loads(row["filter"]), action),
            state=OperationState(row["state"]),
            total=row["total"],
            processed=row["processed"],
            actor=row["actor"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            finished_at=row["finished_at"],
        )


def _params(tenant: str, found: Filter, cutoff: datetime | None) -> tuple[object, ...]:
    return (
        tenant,
        [s.value for s in found.states],
        found.job,
        found.like,
        found.from_,
        found.to,
        found.error_contains,
        found.min_attempts,
        found.max_attempts,
        cutoff,
    )


async def count(
    conn: Connection, tenant: str, action: Action, found: Filter, cutoff: datetime | None
) -> int:
    """How many of the shard's runs the operation would act on now."""
    statement = SQL.count_live_matching if action is Action.cancel else SQL.count_dead_matching
    value = await conn.fetchval(statement, *_params(tenant, found, cutoff))
    assert isinstance(value, int)
    return value


async def create(
    conn: Connection,
    operation_id: str,
    tenant: str,
    action: Action,
    found: Filter,
    actor: str,
    now: datetime | None = None,
) -> int:
    """The operation's row in this shard, with what matches now counted in the same
    transaction; returns that count (0: the row is done already)."""
    async with conn.transaction():
        created = await clock.now(conn, now)
        total = await count(conn, tenant, action, found, created)
        await conn.execute(
            SQL.insert_operation,
            operation_id,
            tenant,
            action.value,
            orjson.dumps(found.document()).decode(),
            total,
            actor,
            created,
        )
    return total


async def get(
    conn: Connection, shard: int, operation_id: str, tenant: str
) -> ShardOperation | None:
    row = await conn.fetchrow(SQL.operation_by_id, operation_id, tenant)
    return None if row is None else ShardOperation.from_record(shard, row)


async def recent(conn: Connection, shard: int, tenant: str, limit: int) -> list[ShardOperation]:
    rows = await conn.fetch(SQL.recent_operations, tenant, limit)
    return [ShardOperation.from_record(shard, row) for row in rows]


async def cancel(
    conn: Connection, operation_id: str, tenant: str, now: datetime | None = None
) -> None:
    """Stop the operation in this shard (waits for a batch in flight to commit)."""
    await conn.execute(SQL.cancel_operation, operation_id, tenant, now)


async def running(conn: Connection) -> list[str]:
    return [row["id"] for row in await conn.fetch(SQL.running_operations)]


async def matching_runs(
    conn: Connection,
    shard: int,
    tenant: str,
    found: Filter,
    before: tuple[datetime, int] | None,
    limit: int,
) -> list[Run]:
    """A page of the filter's runs (of one state), newest first by the instant the
    filter's time range is on; ``before`` is the keyset bound."""
    at, run_id = before if before is not None else (None, None)
    statement = SQL.finished_runs_matching if found.finished else SQL.live_runs_matching
    rows = await conn.fetch(statement, *_params(tenant, found, None), at, run_id, limit)
    return [Run.from_record(shard, row) for row in rows]


@dataclass(frozen=True, slots=True)
class Batch:
    """What one batch did: runs acted on, and whether the operation's row is finished
    in this shard (done, or found cancelled)."""

    acted: int
    finished: bool


async def work_batch(
    conn: Connection,
    operation_id: str,
    size: int = DEFAULT_BATCH,
    now: datetime | None = None,
    *,
    fence: epochs.Fence | None = None,
) -> Batch:
    """One batch of the operation in this shard, in one transaction."""
    async with conn.transaction():
        await epochs.check(conn, fence)
        row = await conn.fetchrow(SQL.lock_operation, operation_id)
        if row is None or row["state"] != OperationState.running.value:
            return Batch(0, True)
        operation = ShardOperation.from_record(0, row)
        moment = await clock.now(conn, now)
        statement = (
            SQL.next_live_batch if operation.action is Action.cancel else SQL.next_dead_batch
        )
        picked = await conn.fetch(
            statement,
            *_params(operation.tenant, operation.filter, operation.created_at),
            row["cursor"],
            size,
        )
        acted = 0
        woken: set[str] = set()
        for run in picked:
            if await _act(conn, operation.action, run, moment):
                acted += 1
                if operation.action is Action.replay:
                    woken.add(run["queue"])
        finished = len(picked) < size
        cursor = picked[-1]["id"] if picked else row["cursor"]
        await conn.execute(SQL.advance_operation, operation_id, cursor, acted, finished, moment)
        await runs.notify_ready(conn, sorted(woken))
    return Batch(acted, finished)


async def _act(conn: Connection, action: Action, run: Row, now: datetime) -> bool:
    """Act on one run picked by the batch; False when it no longer qualifies (the
    statements act only on a run still in the state they expect)."""
    if action is Action.replay:
        return await conn.fetchrow(SQL.replay_dead, run["id"], now) is not None
    if action is Action.discard:
        return await conn.fetchrow(SQL.discard_dead, run["id"], now) is not None
    # The batch locked the live row: its state is as picked.
    if run["state"] == State.leased.value:
        return await conn.fetchrow(runs.SQL.request_cancel, run["id"], now) is not None
    return await conn.fetchrow(runs.SQL.cancel_pending, run["id"], now) is not None
