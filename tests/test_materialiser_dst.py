"""A stored job's ``schedule.dst`` policy, end to end on a real PostgreSQL: the runs the
materialiser makes across Europe/Berlin's clock changes of 2026, the next fire time the
job shows, what is stored, and edits of the policy.

Time is an injected ``FrozenClock`` stepped by scheduler passes; the expected instants
are written out (docs/cron.md works the same example).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tickwork.core.clock import FrozenClock
from tickwork.core.spec import JobSpec, parse
from tickwork.engine.jobs import Change, Jobs
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

TENANT = "acme"
ACTOR = "alice@example.com"
BERLIN = "Europe/Berlin"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def job(cron: str, dst: dict[str, str] | None = None, **schedule: Any) -> JobSpec:
    body: dict[str, Any] = {"cron": cron, "timeZone": BERLIN, "jitterSeconds": 0, **schedule}
    if dst is not None:
        body["dst"] = dst
    return parse(JobSpec, {"schedule": body})


async def due_times(database: Database, name: str) -> list[str]:
    found: list[datetime] = []
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            rows = await conn.fetch(
                "SELECT due_at FROM runs WHERE tenant = $1 AND job = $2", TENANT, name
            )
        found += [row["due_at"] for row in rows]
    return [instant.strftime("%Y-%m-%dT%H:%MZ") for instant in sorted(found)]


async def stored_schedule(database: Database, name: str) -> dict[str, Any]:
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            text = await conn.fetchval(
                "SELECT spec::text FROM definitions WHERE tenant = $1 AND name = $2",
                TENANT,
                name,
            )
        if text is not None:
            schedule: dict[str, Any] = json.loads(text)["schedule"]
            return schedule
    raise AssertionError(f"{name} is not stored")


async def walk(scheduler: Scheduler, clock: FrozenClock, until: datetime) -> None:
    """A scheduler pass every five minutes up to ``until``."""
    while clock.now() < until:
        clock.advance(300)
        await scheduler.pass_once()


async def next_run(jobs: Jobs, name: str) -> str | None:
    due = (await jobs.get(TENANT, name)).definition.next_due_at
    return None if due is None else due.strftime("%Y-%m-%dT%H:%MZ")


async def test_a_stored_policy_materialises_across_both_clock_changes(
    database: Database,
) -> None:
    clock = FrozenClock(utc("2026-03-28T20:00:00Z"))
    jobs = Jobs(database, clock)
    specs = {
        "nightly": job("30 2 * * *"),
        "nightly-skip": job("30 2 * * *", {"skipped": "skip"}),
        "nightly-last": job("30 2 * * *", {"repeated": "last"}),
        "nightly-both": job("30 2 * * *", {"repeated": "both", "skipped": "skip"}),
        "hourly-first": job("0 * * * *", {"repeated": "first", "skipped": "shift"}),
    }
    for name, spec in specs.items():
        await jobs.put(TENANT, name, spec, ACTOR)
    scheduler = Scheduler(database, clock=clock)

    # Spring: 02:30 does not exist on Sunday 29 March 2026.
    assert await next_run(jobs, "nightly") == "2026-03-29T01:00Z"  # 03:00 CEST
    assert await next_run(jobs, "nightly-skip") == "2026-03-30T00:30Z"  # Monday 02:30 CEST
    await walk(scheduler, clock, utc("2026-03-30T01:00:00Z"))
    assert await due_times(database, "nightly") == ["2026-03-29T01:00Z", "2026-03-30T00:30Z"]
    assert await due_times(database, "nightly-skip") == ["2026-03-30T00:30Z"]
    assert await due_times(database, "nightly-both") == ["2026-03-30T00:30Z"]
    hourly = await due_times(database, "hourly-first")
    # 00:00 CET, then 03:00 CEST: 02:00 shifted onto 03:00 is one run, not two.
    assert [t for t in hourly if "2026-03-29T00" <= t < "2026-03-29T02"] == [
        "2026-03-29T00:00Z",
        "2026-03-29T01:00Z",
    ]

    # Autumn: 02:30 happens twice on Sunday 25 October 2026. The scheduler was not
    # running in between (missed times follow missedRunPolicy: run_once keeps one).
    clock.set(utc("2026-10-24T20:00:00Z"))
    await scheduler.pass_once()
    assert await next_run(jobs, "nightly-last") == "2026-10-25T01:30Z"  # 02:30 CET
    await walk(scheduler, clock, utc("2026-10-25T04:00:00Z"))
    autumn = "2026-10-24T21"  # after the catch-up run of the outage
    recent = {name: [t for t in await due_times(database, name) if t > autumn] for name in specs}
    assert recent["nightly"] == ["2026-10-25T00:30Z"]  # the first 02:30 (CEST)
    assert recent["nightly-last"] == ["2026-10-25T01:30Z"]  # the second (CET)
    assert recent["nightly-both"] == ["2026-10-25T00:30Z", "2026-10-25T01:30Z"]
    # 02:00 CEST, not 02:00 CET, then 03:00 CET: the night has a two-hour step.
    night = [t for t in recent["hourly-first"] if "2026-10-24T23" <= t <= "2026-10-25T02:00Z"]
    assert night == ["2026-10-24T23:00Z", "2026-10-25T00:00Z", "2026-10-25T02:00Z"]


async def test_the_policy_is_stored_only_when_it_chooses_something(database: Database) -> None:
    clock = FrozenClock(utc("2026-10-24T12:00:00Z"))
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "plain", job("30 2 * * *", {}), ACTOR)
    assert "dst" not in await stored_schedule(database, "plain")
    shown = (await jobs.get(TENANT, "plain")).definition.spec.to_document()
    assert "dst" not in shown["schedule"]
    await jobs.put(TENANT, "chosen", job("30 2 * * *", {"repeated": "last"}), ACTOR)
    assert (await stored_schedule(database, "chosen"))["dst"] == {"repeated": "last"}
    # Put again as written: nothing changes (a manifest applied again).
    again = await jobs.put(TENANT, "chosen", job("30 2 * * *", {"repeated": "last"}), ACTOR)
    assert again.change is Change.unchanged
    same = await jobs.put(TENANT, "plain", job("30 2 * * *"), ACTOR)
    assert same.change is Change.unchanged


async def test_editing_the_policy_moves_the_next_fire_time(database: Database) -> None:
    clock = FrozenClock(utc("2026-10-24T12:00:00Z"))
    jobs = Jobs(database, clock)
    await jobs.put(TENANT, "nightly", job("30 2 * * *"), ACTOR)
    assert await next_run(jobs, "nightly") == "2026-10-25T00:30Z"
    await jobs.put(TENANT, "nightly", job("30 2 * * *", {"repeated": "last"}), ACTOR)
    assert await next_run(jobs, "nightly") == "2026-10-25T01:30Z"
    await jobs.put(TENANT, "nightly", job("30 2 * * *", {"repeated": "first"}), ACTOR)
    assert await next_run(jobs, "nightly") == "2026-10-25T00:30Z"

    # The scheduler is down past the first 02:30. Saying what the hour field already
    # says changes no fire time: the job keeps its place, and its missed run.
    clock.set(utc("2026-10-25T00:45:00Z"))
    await jobs.put(TENANT, "nightly", job("30 2 * * *", {"skipped": "shift"}), ACTOR)
    assert await next_run(jobs, "nightly") == "2026-10-25T00:30Z"
    await Scheduler(database, clock=clock).pass_once()
    assert await due_times(database, "nightly") == ["2026-10-25T00:30Z"]
    # Both occurrences from now on: the second 02:30 is still to come tonight.
    await jobs.put(TENANT, "nightly", job("30 2 * * *", {"repeated": "both"}), ACTOR)
    assert await next_run(jobs, "nightly") == "2026-10-25T01:30Z"
    clock.set(utc("2026-10-25T01:30:00Z"))
    await Scheduler(database, clock=clock).pass_once()
    assert await due_times(database, "nightly") == ["2026-10-25T00:30Z", "2026-10-25T01:30Z"]
