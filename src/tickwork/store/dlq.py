"""The dead-letter queue: list dead runs, replay them, discard them (with the actor)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from tickwork.core import shards
from tickwork.core.errors import InvalidState, NotFound
from tickwork.core.records import UNRESTRICTED, Run, Scope, State
from tickwork.store import queries, runs
from tickwork.store.database import Connection


class SQL(queries.Statements):
    dead_runs: str
    replay_dead: str
    discard_dead: str
    run_by_id: str
    was_replayed: str


async def list_dead(
    conn: Connection,
    shard: int,
    tenant: str,
    job: str | None,
    before: tuple[datetime, int] | None,
    limit: int,
) -> list[Run]:
    """Dead runs of ``tenant`` (optionally one job), newest death first."""
    finished_at, run_id = before if before is not None else (None, None)
    rows = await conn.fetch(SQL.dead_runs, tenant, job, finished_at, run_id, limit)
    return [Run.from_record(shard, row) for row in rows]


Verb = Literal["replay", "discard"]


async def act(
    conn: Connection,
    shard: int,
    run_id: int,
    verb: Verb,
    actor: str,
    now: datetime | None = None,
    scope: Scope = UNRESTRICTED,
) -> Run:
    """``replay``: dead → ready with a fresh attempt budget; ``discard``: dead →
    discarded (terminal). Only a run ``scope`` may see, and audited as ``verb``."""
    async with conn.transaction():
        await runs.require_visible(conn, shard, run_id, scope)
        statement = SQL.replay_dead if verb == "replay" else SQL.discard_dead
        row = await conn.fetchrow(statement, run_id, now)
        if row is None:
            # Both are idempotent: the same call again (a client that lost the first
            # answer) gets the run it acted on, as it is now.
            if verb == "replay":
                if await conn.fetchval(SQL.was_replayed, run_id):
                    return await runs.get(conn, shard, run_id, scope)
            else:
                found = await runs.get(conn, shard, run_id, scope)
                if found.state is State.discarded:
                    return found
            raise await _refusal(conn, shard, run_id, verb)
        await runs.audit(conn, row["tenant"], row["job"], run_id, verb, actor, None, now)
        if verb == "replay":
            await runs.notify_ready(conn, [row["queue"]])
    return Run.from_record(shard, row)


async def _refusal(conn: Connection, shard: int, run_id: int, verb: str) -> NotFound | InvalidState:
    public = shards.format_run_id(shard, run_id)
    row = await conn.fetchrow(SQL.run_by_id, run_id)
    if row is None:
        return NotFound(f"no run {public!r}", field="runId")
    return InvalidState(
        f"cannot {verb} run {public}: it is {row['state']}, only {State.dead.value} runs can be"
    )
