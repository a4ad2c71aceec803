"""(h) The top of the hour: N cron definitions (default 100 000) due at the same minute
with 60 s of jitter, on the real roles: a ``tickwork scheduler`` process materialises
and flips them, a ``tickwork dispatcher`` process serves 4 worker SDK processes (a
no-op handler). The figure is the time from the minute until every run has been leased.
Jitter spreads the runs over the minute, so 60 s is the floor.

A smoke run (``--smoke``) has its fleet due a few seconds ahead, to the second and
without jitter, so that it waits neither for the minute nor for the jitter.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import orjson

from bench import Context, Table, register
from bench.harness import scaled
from bench.http import ADMIN, SHARDS, dispatcher, migrate, sdk_process
from bench.materialiser import JITTER_SECONDS, close_all, connect_all, fill
from tickwork.core.shards import ShardMap
from tickwork.core.spec import JobSpec, Schedule

DEFINITIONS = 100_000
LEAD_SECONDS = 45  # the minute is at least this far ahead when the fleet is filled
SMOKE_LEAD_SECONDS = 2
FIRST_LEASES = """
SELECT count(*) AS leased, max(leased_at) AS last
FROM runs
WHERE origin = 'cron' AND attempt >= 1 AND due_at = $1
"""


def due_time(now: datetime, smoke: bool) -> tuple[datetime, int]:
    """When the fleet is due, and its jitter in seconds."""
    if smoke:
        return (now + timedelta(seconds=SMOKE_LEAD_SECONDS)).replace(microsecond=0), 0
    due = (now + timedelta(seconds=LEAD_SECONDS + 60)).replace(second=0, microsecond=0)
    return due, JITTER_SECONDS


async def _leased(shard_map: ShardMap, due: datetime) -> tuple[int, datetime | None]:
    conns = await connect_all(shard_map)
    total, last = 0, None
    try:
        for conn in conns:
            row = await conn.fetchrow(FIRST_LEASES, due)
            total += row["leased"]
            if row["last"] is not None and (last is None or row["last"] > last):
                last = row["last"]
    finally:
        await close_all(conns)
    return total, last


@register("spike", "(h) 100k cron runs due at one minute with 60 s jitter: time to all leased")
def spike(context: Context) -> list[Table]:
    shard_map = asyncio.run(migrate(context.database_url))
    count = scaled(DEFINITIONS)
    due, jitter = due_time(datetime.now(UTC), context.smoke)
    spec = JobSpec(schedule=Schedule(cron=f"{due.minute} {due.hour} * * *", jitter_seconds=jitter))
    document = orjson.dumps(spec.to_document()).decode()

    async def prepare() -> None:
        conns = await connect_all(shard_map)
        try:
            await fill(conns, count, due, document)
        finally:
            await close_all(conns)

    asyncio.run(prepare())
    # No probes: their port (8081 on every address) may be another process's.
    scheduler = subprocess.Popen(  # noqa: S603 - our own CLI
        [
            sys.executable,
            "-m",
            "tickwork",
            "scheduler",
            "--shards",
            str(SHARDS),
            "--health-port",
            "-1",
        ],
        env={
            **os.environ,
            "TICKWORK_DATABASE_URL": context.database_url,
            "TICKWORK_LOG_LEVEL": "WARNING",
        },
    )
    try:
        with dispatcher(context.database_url) as url:
            window = (due - datetime.now(UTC)).total_seconds() + 60 + 60
            pool = multiprocessing.get_context("spawn").Pool(4)
            try:
                pool.map_async(sdk_process, [(url, 100, window, ADMIN, "default")] * 4)
                deadline = time.monotonic() + window + 30
                leased, last = 0, None
                while time.monotonic() < deadline:
                    # The figure is the last lease's time, not when it is seen: a smoke run
                    # looks sooner only so as to end sooner.
                    time.sleep(0.5 if context.smoke else 2)
                    leased, last = asyncio.run(_leased(shard_map, due))
                    if leased >= count:
                        break
                    if scheduler.poll() is not None:
                        raise RuntimeError(f"the scheduler exited ({scheduler.returncode})")
            finally:
                pool.terminate()
                pool.join()
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=20)
    all_leased = (last - due).total_seconds() if last is not None and leased >= count else None
    if all_leased is not None:
        context.figures["spike_all_leased_s"] = round(all_leased, 2)
    return [
        Table(
            f"(h) spike: {count:,} cron definitions due at {due:%H:%M} UTC, jitter "
            f"{jitter} s, scheduler + dispatcher + 4 SDK processes",
            [
                {
                    "runs": count,
                    "leased": leased,
                    "last lease after the minute s": None
                    if last is None
                    else round((last - due).total_seconds(), 2),
                    "all leased": leased >= count,
                }
            ],
            notes=[f"the jitter alone puts the last run at up to {jitter} s after the minute"],
        )
    ]
