"""The set of jobs whose status may have changed, per shard.

Statements that change a job's runs or definition add the job to ``changed_jobs``
(``ON CONFLICT DO NOTHING``: a job already in the set costs an index probe and no
write). The operator's status pass drains the set and reads the status of those jobs
only, so its cost follows the jobs that changed, not the jobs there are.

A drain races with the transactions in flight: one that found its job already marked
(so added nothing) and commits after the drain would have its change read by nobody.
``settled`` says when every transaction in flight at the drain has ended; the status
pass reads after that (or reads again next time).
"""

from __future__ import annotations

from collections.abc import Sequence

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    mark_changed_jobs: str
    drain_changed_jobs: str
    current_snapshot: str
    unfinished_of_snapshot: str


async def mark(conn: Connection, keys: Sequence[tuple[str, str]]) -> None:
    """Add ``(tenant, job)`` pairs to the set (in the caller's transaction)."""
    if keys:
        await conn.execute(SQL.mark_changed_jobs, [k[0] for k in keys], [k[1] for k in keys])


async def drain(
    conn: Connection, limit: int, tenants: Sequence[str] | None = None
) -> tuple[list[tuple[str, str]], str]:
    """Take up to ``limit`` jobs off the set (of ``tenants``; None: all); returns them
    and the snapshot of the transactions in flight right after (for ``settled``)."""
    rows = await conn.fetch(
        SQL.drain_changed_jobs, limit, None if tenants is None else list(tenants)
    )
    snapshot = await conn.fetchval(SQL.current_snapshot)
    assert isinstance(snapshot, str)
    return [(row["tenant"], row["job"]) for row in rows], snapshot


async def settled(conn: Connection, snapshot: str) -> bool:
    """Whether every transaction in flight at ``snapshot`` has committed or aborted."""
    unfinished: int = await conn.fetchval(SQL.unfinished_of_snapshot, snapshot)
    return unfinished == 0
