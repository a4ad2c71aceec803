"""Readiness: whether this process can serve, and what each shard's health is.

A process is ready while at least one shard serves: reachable, at a schema version its
code runs against (``store.compatibility``) and the shard it should be. One shard's
outage must not take every replica out of its Service, so a shard that does not serve
is reported (``problems``, ``down``, the ``tickwork_shard_up`` gauge, an alert), never
by the readiness of the process while another shard serves. One exception holds a
process back until it has first been ready: a shard still behind its schema (the
migration of an upgrade has not reached it). A rolling update then keeps the previous
release's pods, which serve the shards on either side of the migration, until the new
pods serve every shard; once ready, a shard found behind is that shard's problem only.

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
import weakref
from dataclasses import dataclass
from typing import Literal

from tickwork.core.errors import SchemaMismatch
from tickwork.store import compatibility, migrate, outages
from tickwork.store.database import Database

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Readiness:
    shards: int
    problems: tuple[str, ...] = ()  # one per shard down, for anyone to read
    down: tuple[int, ...] = ()  # the shard numbers the problems are about
    # Of those, the shards this code will not serve until someone acts: a schema of
    # another shard, a reshard half done, a schema newer than this code runs against.
    mismatched: tuple[int, ...] = ()
    behind: tuple[int, ...] = ()  # of those, the shards a migration has not reached yet
    details: tuple[str, ...] = ()  # the same problems with their errors, for operators
    starting: bool = False  # this process has not been ready yet

    @property
    def serving(self) -> tuple[int, ...]:
        """The shards that serve."""
        return tuple(n for n in range(self.shards) if n not in self.down)

    @property
    def ready(self) -> bool:
        """At least one shard serves (and, before the first time, none is behind)."""
        return bool(self.serving) and not (self.starting and self.behind)

    @property
    def status(self) -> Literal["ready", "degraded", "unavailable"]:
        if not self.ready:
            return "unavailable"
        return "degraded" if self.problems else "ready"


# Checks past their bound, kept until they end.
_abandoned: set[asyncio.Task[tuple[str, str] | None]] = set()
# The databases (one per process) whose readiness has once been ready.
_served: weakref.WeakSet[Database] = weakref.WeakSet()


def _unreachable(number: int, error: Exception) -> tuple[str, str]:
    said = "unreachable (starting up)" if outages.starting_up(error) else "unreachable"
    return f"shard {number}: {said}", f"shard {number} unreachable: {outages.describe(error)}"


async def check(database: Database, within: float) -> Readiness:
    shard_map = database.shard_map

    mismatched: list[int] = []
    behind: list[int] = []

    async def one(number: int) -> tuple[str, str] | None:
        """(what anyone may read, the detail) of a shard that is not ready."""
        try:
            # A new pooled connection is refused for a shard this code does not serve
            # (ShardNotServed); a pooled one is checked here, as the schema may have
            # moved on since it was opened.
            async with database.connection(number) as conn:
                await migrate.check_shard(conn, shard_map[number], shard_map.count)
        except (SchemaMismatch, compatibility.ShardNotServed) as error:
            mismatch = error if isinstance(error, SchemaMismatch) else error.mismatch
            (behind if isinstance(mismatch, compatibility.SchemaBehind) else mismatched).append(
                number
            )
            return f"shard {number}: {mismatch.summary}", mismatch.detail
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
    found = Readiness(
        shard_map.count,
        tuple(problems),
        tuple(down),
        # A late check may still add to these: only what was found in time counts.
        tuple(sorted(n for n in mismatched if tasks[n] not in late)),
        tuple(sorted(n for n in behind if tasks[n] not in late)),
        tuple(details),
        starting=database not in _served,
    )
    if found.ready:
        _served.add(database)
    return found
