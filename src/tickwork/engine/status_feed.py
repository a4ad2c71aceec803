"""The status of the jobs that changed, shard by shard, for the operator's status pass.

Each drain takes the jobs marked changed on a shard since the last one (see
``store.changes``), waits briefly for the transactions that were in flight to end
(their changes would otherwise be marked by nobody), and reads the status of those
jobs in one query. The cost of a pass follows the jobs that changed: a quiet shard
costs one empty DELETE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tickwork.core.records import JobStatus, Manager
from tickwork.store import changes, definitions
from tickwork.store.database import Connection, Database

DRAIN_BATCH: Final = 1000
SETTLE_SECONDS: Final = 1.0
_SETTLE_POLL: Final = 0.005


@dataclass(frozen=True, slots=True)
class Drained:
    statuses: list[JobStatus]  # of the jobs ``manager`` keeps, among the ones drained
    # False: a transaction in flight at the drain was still running after the settle
    # time, so these jobs are worth reading again at the next pass.
    settled: bool
    keys: list[tuple[str, str]]  # every job drained


class StatusFeed:
    def __init__(
        self,
        database: Database,
        manager: Manager = Manager.kubernetes,
        *,
        batch: int = DRAIN_BATCH,
        settle_seconds: float = SETTLE_SECONDS,
    ) -> None:
        self.database = database
        self.manager = manager
        self.batch = batch
        self.settle_seconds = settle_seconds

    async def drain(
        self,
        shard: int,
        tenants: Sequence[str] | None = None,
        again: Sequence[tuple[str, str]] = (),
    ) -> Drained:
        """Take the changed jobs of ``tenants`` (None: all) off ``shard``'s set and read
        their status, with ``again`` (jobs read last time before they settled)."""
        async with self.database.connection(shard) as conn:
            keys, snapshot = await changes.drain(conn, self.batch, tenants)
            settled = True
            if keys:
                settled = await self._settle(conn, snapshot)
            wanted = sorted(set(keys) | set(again))
            statuses = await definitions.statuses(conn, shard, wanted)
        return Drained(
            [s for s in statuses if s.managed_by is self.manager], settled, sorted(set(keys))
        )

    async def _settle(self, conn: Connection, snapshot: str) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settle_seconds
        while not await changes.settled(conn, snapshot):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(_SETTLE_POLL)
        return True
