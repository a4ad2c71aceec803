"""Notification watches: a run not succeeded by its job's deadline, an attempt leased
longer than its job allows.

A dead run or an auto-paused job is told in the transaction that makes it so
(record_failures in leases.sql). These two are about time passing with nothing
happening, so nothing makes them but a look: each scheduler pass over a shard (at most
every ``INTERVAL_SECONDS``) finds the runs of the jobs that watch (notifications.sql,
watched_runs), decides which are overdue, and makes their notifications as runs of
``tickwork.notify``, delivered as the others are (engine.notifications). Each
notification's key (``notify/deadlineMissed/<run id>``,
``notify/leasedTooLong/<run id>/<attempt>``) is taken in ``run_keys`` with the run it
makes: a second look, or a second scheduler after a failover, makes none.

The deadline is read by the cron engine, as the fire time ``MM HH * * *`` in the zone
(notify.timeZone, else the schedule's, else UTC) strictly after the run's due time: a
local time skipped by a DST change is the instant after the gap, a repeated one its
first occurrence, as for a fixed-hour cron job.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from tickwork.core.cron import CronSchedule
from tickwork.store import clock as store_clock
from tickwork.store import epochs, notifications
from tickwork.store.database import Connection
from tickwork.store.notifications import Notice, Watched

# A look every 10 s: a deadline or a lease limit is told at most that late (plus the
# delivery), for a query over the few jobs that watch.
INTERVAL_SECONDS: Final = 10.0
# Finished runs are looked at for two days: a deadline is at most a day and an hour (a
# DST night) after the due time, and a scheduler down longer than the rest has its dead
# runs told anyway (`dead`).
LOOKBACK_SECONDS: Final = 2 * 86400.0
BATCH: Final = 500


def deadline_of(due_at: datetime, deadline: str, zone: str) -> datetime | None:
    """The first ``deadline`` ("HH:MM") in ``zone`` strictly after ``due_at``."""
    hour, minute = deadline.split(":")
    return CronSchedule.parse(f"{int(minute)} {int(hour)} * * *", zone).next_after(due_at)


def _instant(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def notice_of(watched: Watched, now: datetime) -> Notice | None:
    """The notification ``watched`` is due, or None while its deadline is ahead."""
    run_id = watched.run_id
    body: dict[str, object] = {
        "event": watched.event,
        "tenant": watched.tenant,
        "job": watched.job,
        "runId": run_id,
        "target": watched.target,
        "at": _instant(now),
    }
    if watched.event == "leasedTooLong":
        assert watched.leased_at is not None
        body |= {
            "attempt": watched.attempt,
            "leasedAt": _instant(watched.leased_at),
            "workerId": watched.worker_id,
            "leasedLongerThanSeconds": watched.notify["leasedLongerThanSeconds"],
        }
        return Notice(watched.tenant, f"notify/leasedTooLong/{run_id}/{watched.attempt}", body)
    zone = watched.notify.get("timeZone") or watched.schedule_zone or "UTC"
    deadline = deadline_of(watched.due_at, watched.notify["deadline"], zone)
    if deadline is None or deadline > now:
        return None
    body |= {
        "state": watched.state,
        "dueAt": _instant(watched.due_at),
        "deadline": _instant(deadline),
        "timeZone": zone,
    }
    return Notice(watched.tenant, f"notify/deadlineMissed/{run_id}", body)


async def look(
    conn: Connection,
    now: datetime | None,
    *,
    fence: epochs.Fence | None = None,
    batch: int = BATCH,
) -> int:
    """One look over a shard: the notifications of its overdue runs made; how many.
    ``now`` None: the database's clock."""
    async with conn.transaction():
        await epochs.check(conn, fence)
        now = await store_clock.now(conn, now)
        found = await notifications.watched_runs(conn, now, LOOKBACK_SECONDS, batch)
        due = [notice for w in found if (notice := notice_of(w, now)) is not None]
        return await notifications.enqueue(conn, due, now)
