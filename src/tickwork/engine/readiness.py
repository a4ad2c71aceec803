"""Readiness: every shard reachable, migrated, and the shard it should be.

Every shard is checked at once, and the answer comes within ``within`` seconds even
when a link hangs: a check that outlives the bound counts as a shard down and is left
to finish on its own, within the pool's statement timeout (cancelling one stuck on a
hung link would not end it sooner).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tickwork.core.errors import SchemaMismatch
from tickwork.store import migrate, outages
from tickwork.store.database import Database


@dataclass(frozen=True, slots=True)
class Readiness:
    shards: int
    problems: tuple[str, ...] = ()
    down: tuple[int, ...] = ()  # the shard numbers the problems are about
    mismatched: tuple[int, ...] = ()  # of those, the ones of another schema version

    @property
    def ready(self) -> bool:
        return not self.problems


# Checks past their bound, kept until they end.
_abandoned: set[asyncio.Task[str | None]] = set()


async def check(database: Database, within: float) -> Readiness:
    shard_map = database.shard_map

    mismatched: list[int] = []

    async def one(number: int) -> str | None:
        try:
            async with database.connection(number) as conn:
                await migrate.check_shard(conn, shard_map[number], shard_map.count)
        except SchemaMismatch as error:
            mismatched.append(number)
            return error.detail
        except Exception as error:
            if not outages.is_outage(error):
                raise
            return f"shard {number} unreachable: {outages.describe(error)}"
        return None

    tasks = [asyncio.create_task(one(n)) for n in range(shard_map.count)]
    _, late = await asyncio.wait(tasks, timeout=within)
    for task in late:
        _abandoned.add(task)
        task.add_done_callback(_abandoned.discard)
    problems: list[str] = []
    down: list[int] = []
    for number, task in enumerate(tasks):
        if task in late:
            problem: str | None = f"shard {number} unreachable: no answer within {within:g}s"
        else:
            problem = task.result()
        if problem is not None:
            problems.append(problem)
            down.append(number)
    return Readiness(shard_map.count, tuple(problems), tuple(down), tuple(sorted(mismatched)))
