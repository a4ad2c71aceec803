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

from tickwork.core.operations import Action, Filter, OperationState
from tickwork.core.records import Row, Run, State
from tickwork.store import clock, epochs, queries, runs
from tickwork.store.database import Connection

COUNT_DEAD: Final = queries.get("count_dead_matching")
COUNT_LIVE: Final = queries.get("count_live_matching")
NEXT_DEAD_BATCH: Final = queries.get("next_dead_batch")
NEXT_LIVE_BATCH: Final = queries.get("next_live_batch")
FINISHED_MATCHING: Final = queries.get("finished_runs_matching")
LIVE_MATCHING: Final = queries.get("live_runs_matching")
INSERT_OPERATION: Final = queries.get("insert_operation")
OPERATION_BY_ID: Final = queries.get("operation_by_id")
LOCK_OPERATION: Final = queries.get("lock_operation")
RUNNING_OPERATIONS: Final = queries.get("running_operations")
RECENT_OPERATIONS: Final = queries.get("recent_operations")
ADVANCE_OPERATION: Final = queries.get("advance_operation")
CANCEL_OPERATION: Final = queries.get("cancel_operation")
REPLAY_DEAD: Final = queries.get("replay_dead")
DISCARD_DEAD: Final = queries.get("discard_dead")

DEFAULT_BATCH: Final = 500


@dataclass(frozen=True, slots=True)
class ShardOperation:
    """An operation's row in one shard."""

    shard: int
    id: str
    tenant: str
    action: Action
    filter: Filter
    state: OperationState
    total: int
    processed: int
    actor: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

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
    statement = COUNT_LIVE if action is Action.cancel else COUNT_DEAD
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
            INSERT_OPERATION,
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
    row = await conn.fetchrow(OPERATION_BY_ID, operation_id, tenant)
    return None if row is None else ShardOperation.from_record(shard, row)


async def recent(conn: Connection, shard: int, tenant: str, limit: int) -> list[ShardOperation]:
    rows = await conn.fetch(RECENT_OPERATIONS, tenant, limit)
    return [ShardOperation.from_record(shard, row) for row in rows]


async def cancel(
    conn: Connection, operation_id: str, tenant: str, now: datetime | None = None
) -> None:
    """Stop the operation in this shard (waits for a batch in flight to commit)."""
    await conn.execute(CANCEL_OPERATION, operation_id, tenant, now)


async def running(conn: Connection) -> list[str]:
    return [row["id"] for row in await conn.fetch(RUNNING_OPERATIONS)]


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
    statement = FINISHED_MATCHING if found.finished else LIVE_MATCHING
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
        row = await conn.fetchrow(LOCK_OPERATION, operation_id)
        if row is None or row["state"] != OperationState.running.value:
            return Batch(0, True)
        operation = ShardOperation.from_record(0, row)
        moment = await clock.now(conn, now)
        statement = NEXT_LIVE_BATCH if operation.action is Action.cancel else NEXT_DEAD_BATCH
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
        await conn.execute(ADVANCE_OPERATION, operation_id, cursor, acted, finished, moment)
        await runs.notify_ready(conn, sorted(woken))
    return Batch(acted, finished)


async def _act(conn: Connection, action: Action, run: Row, now: datetime) -> bool:
    """Act on one run picked by the batch; False when it no longer qualifies (the
    statements act only on a run still in the state they expect)."""
    if action is Action.replay:
        return await conn.fetchrow(REPLAY_DEAD, run["id"], now) is not None
    if action is Action.discard:
        return await conn.fetchrow(DISCARD_DEAD, run["id"], now) is not None
    # The batch locked the live row: its state is as picked.
    if run["state"] == State.leased.value:
        return await conn.fetchrow(runs.REQUEST_CANCEL, run["id"], now) is not None
    return await conn.fetchrow(runs.CANCEL_PENDING, run["id"], now) is not None
