"""Run ids from before a reshard: where a run that left its shard went.

A run id ``r{k}-{n}`` names run n of shard k. When the shard count doubles, the runs
of the jobs that move from k to k + S keep their number n there, and shard k keeps a
forwarding row per run (``moved_runs``). A lookup that finds no run n on shard k (the
rare case: heartbeats and completions of a run that is there pay nothing) follows the
forwarding rows, hop by hop when a later reshard moved the run again, so a worker's
heartbeat and completion and ``GET /v1/runs/{id}`` keep working with the id they have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Final

from tickwork.store import reshard
from tickwork.store.database import Database

# Each reshard doubles the shards: more hops than this is 2**16 times the shards.
MAX_HOPS: Final = 16


async def follow(database: Database, shard: int, local_ids: Iterable[int]) -> dict[int, int]:
    """The shard each of ``local_ids`` of ``shard`` is on now, for those that moved."""
    where: dict[int, int] = {}
    pending = {local: shard for local in local_ids}
    for _ in range(MAX_HOPS):
        by_shard: dict[int, list[int]] = {}
        for local, at in pending.items():
            by_shard.setdefault(at, []).append(local)

        async def look(at: int, ids: list[int]) -> dict[int, int]:
            async with database.connection(at) as conn:
                return await reshard.forwarded(conn, ids)

        found = await asyncio.gather(*(look(at, ids) for at, ids in by_shard.items()))
        pending = {
            local: to
            for moved in found
            for local, to in moved.items()
            if 0 <= to < database.shard_count
        }
        where.update(pending)
        if not pending:
            break
    return where
