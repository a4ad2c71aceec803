"""Backfill: the runs a job's schedule would have made in a past range, made now.

After an outage that outlasted a job's missed-run policy, or for a job created after the
days it should have covered. Each fire time in ``[from, to)`` becomes a run due then,
ready now, with the key the scheduler gives that fire time (``tenant/job@dueAt``): a
fire time that has a run already (made by the scheduler, or by an earlier or
overlapping backfill) makes nothing, so a backfill can be repeated safely. One call
makes at most ``MAX_FIRE_TIMES`` runs and says where the next call starts.

A job with ``overlapPolicy: Forbid`` or ``Replace`` gets its backfilled runs one at a
time (they carry a concurrency limit of 1 among themselves, unless the job has its
own): applied to a backfill the policies would skip or cancel all but one of the runs
asked for, while running them one after another keeps what the policies protect (never
two at once) and what the backfill is for (every window covered).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import orjson

from tickwork.core.clock import Clock
from tickwork.core.errors import InvalidRequest
from tickwork.core.records import Origin
from tickwork.core.spec import OverlapPolicy
from tickwork.engine import materialiser
from tickwork.engine.jobs import database_now
from tickwork.store import definitions, materialise, runs
from tickwork.store.database import Database
from tickwork.store.materialise import PlannedRun

MAX_FIRE_TIMES: Final = 1000
_EPSILON: Final = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Backfilled:
    """What a backfill call made (or, with ``dry_run``, would make)."""

    fire_times: tuple[datetime, ...]  # in [start, end), at most MAX_FIRE_TIMES
    created: int  # runs made now (0 for a dry run)
    existing: int  # fire times that had a run already
    next_from: datetime | None  # where the next call starts; None: the range is done


class Backfills:
    def __init__(self, database: Database, clock: Clock) -> None:
        self.database = database
        self.clock = clock

    async def backfill(
        self,
        tenant: str,
        name: str,
        start: datetime,
        end: datetime,
        actor: str,
        *,
        dry_run: bool = False,
        limit: int = MAX_FIRE_TIMES,
    ) -> Backfilled:
        if end <= start:
            raise InvalidRequest("to must be after from", field="to")
        shard = self.database.shard_map.shard_of(tenant, name)
        async with self.database.transaction(shard) as conn:
            # Shared: an edit of the job waits for the backfill, and the backfill sees
            # the spec it makes the runs from.
            definition = await definitions.lock(conn, shard, tenant, name, exclusive=False)
            if definition is None:
                raise definitions.not_found(tenant, name)
            spec = definition.spec
            if spec.schedule is None:
                raise InvalidRequest(
                    f"job {name!r} has no schedule: there is nothing to backfill", field="job"
                )
            now = await database_now(conn, self.clock)
            if end > now:
                raise InvalidRequest(
                    "to is in the future: a backfill covers the past (the scheduler makes "
                    "what is to come)",
                    field="to",
                )
            times = _fire_times(spec.schedule.compile().iter_after, start, end, limit + 1)
            next_from = times[limit] if len(times) > limit else None
            times = times[:limit]
            if dry_run or not times:
                existing = await materialise.fire_times_taken(conn, tenant, name, times)
                return Backfilled(tuple(times), 0, existing, next_from)
            concurrency = spec.run_concurrency
            if not concurrency and spec.overlap_policy is not OverlapPolicy.Allow:
                concurrency = 1
            zone = spec.schedule.time_zone
            payload = None if spec.payload is None else orjson.dumps(spec.payload).decode()
            planned = [
                PlannedRun(
                    tenant,
                    name,
                    spec.queue,
                    spec.priority.rank,
                    Origin.cron,
                    spec.retry.max_attempts,
                    spec.retry.base_seconds,
                    spec.retry.max_seconds,
                    spec.timeout_seconds,
                    due_at,
                    now,  # ready now: its time has passed
                    None,  # no starting deadline: it was asked for, however late
                    materialiser.idempotency_key(tenant, name, due_at, zone),
                    payload,
                    concurrency,
                    spec.dry_run,
                    None,  # the overlap policy is applied as above, not by the due flip
                )
                for due_at in times
            ]
            inserted = await materialise.insert_runs(conn, planned, now)
            await runs.notify_ready(conn, [r["queue"] for r in inserted if r["state"] == "ready"])
            await runs.audit(
                conn,
                tenant,
                name,
                None,
                "backfill",
                actor,
                {
                    "from": start.isoformat(),
                    "to": end.isoformat(),
                    "fireTimes": len(times),
                    "created": len(inserted),
                },
                now,
            )
        return Backfilled(tuple(times), len(inserted), len(times) - len(inserted), next_from)


def _fire_times(
    iter_after: Callable[[datetime], Iterator[datetime]],
    start: datetime,
    end: datetime,
    count: int,
) -> list[datetime]:
    """Up to ``count`` fire times in ``[start, end)``."""
    found: list[datetime] = []
    for instant in iter_after(start - _EPSILON):
        if instant >= end or len(found) >= count:
            break
        found.append(instant)
    return found
