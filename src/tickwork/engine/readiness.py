"""Readiness: every shard reachable, migrated, and the shard it should be.

Every shard is checked at once, and the answer comes within ``within`` seconds even
when a link hangs: a check that outlives the bound counts as a shard down and is left
to finish on its own, within the pool's statement timeout (cancelling one stuck on a
hung link would not end it sooner).

``problems`` say of each shard what anyone may know (``/readyz`` serves them without a
token): ``shard 1: unreachable``, ``shard 2: schema 12, code needs 13``. The errors
themselves name hosts, ports, schemas and DSNs: they are in ``details`` and logged
(action ``shard-not-ready``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from tickwork.core.errors import SchemaMismatch
from tickwork.store import migrate, outages
from tickwork.store.database import Database

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Readiness:
    shards: int
    problems: tuple[str, ...] = ()  # one per shard down, for anyone to read
    down: tuple[int, ...] = ()  # the shard numbers the problems are about
    mismatched: tuple[int, ...] = ()  # of those, the ones of another schema version
    details: tuple[str, ...] = ()  # the same problems with their errors, for operators

    @property
    def ready(self) -> bool:
        return not self.problems


# Checks past their bound, kept until they end.
_abandoned: set[asyncio.Task[tuple[str, str] | None]] = set()


def _unreachable(number: int, error: Exception) -> tuple[str, str]:
    said = "unreachable (starting up)" if outages.starting_up(error) else "unreachable"
    return f"shard {number}: {said}", f"shard {number} unreachable: {outages.describe(error)}"


async def check(database: Database, within: float) -> Readiness:
    shard_map = database.shard_map

    mismatched: list[int] = []

    async def one(number: int) -> tuple[str, str] | None:
        """(what anyone may read, the detail) of a shard that is not ready."""
        try:
            async with database.connection(number) as conn:
                await migrate.check_shard(conn, shard_map[number], shard_map.count)
        except SchemaMismatch as error:
            mismatched.append(number)
            return f"shard {number}: {error.summary}", error.detail
        except Exception as error:
            if not outages.is_outage(error):
                raise
            return _unreachable(number, error)
        return None

    tasks = [asyncio.create_task(one(n)) for n in range(shard_map.count)]
    _, late = await asyncio.wait(tasks, timeout=within)
    for task in late:
        _abandoned.add(task)
        task.add_done_callback(_abandoned.discard)
    problems: list[str] = []
    details: list[str] = []
    down: list[int] = []
    for number, task in enumerate(tasks):
        if task in late:
            said = f"shard {number}: unreachable (no answer within {within:g}s)"
            problem: tuple[str, str] | None = (said, said)
        else:
            problem = task.result()
        if problem is not None:
            public, detail = problem
            logger.warning(
                "shard %d is not ready: %s",
                number,
                detail,
                extra={"action": "shard-not-ready", "shard": number},
            )
            problems.append(public)
            details.append(detail)
            down.append(number)
    return Readiness(
        shard_map.count,
        tuple(problems),
        tuple(down),
        tuple(sorted(mismatched)),
        tuple(details),
    )
