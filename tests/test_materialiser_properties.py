"""Property: what the materialiser inserts over a window is what the schedule previews.

For generated cron expressions and zones, a clock walked over three days (steps no
longer than the lookahead, at odd seconds, around DST changes) must leave exactly one
run per fire time ``CronSchedule.between`` names, inserted in strictly increasing
order, each ready at its due time plus the job's jitter offset.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import cron_reference
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tickwork.core import hashing
from tickwork.core.clock import FrozenClock
from tickwork.core.cron import CronError, CronSchedule
from tickwork.core.spec import JobSpec, MissedRunPolicy, Schedule
from tickwork.engine import materialiser
from tickwork.engine.jobs import Jobs
from tickwork.store.database import Database

TENANT = "props"
NAME = "walk"
WINDOW = timedelta(days=3)

# No bare "*": a minutely job over three days is 4320 runs and seconds per example.
MINUTE_PIECES = ["*/15", "0", "30", "0,30", "5-50/15", "*/7", "59", "0-4", "*/20"]
HOUR_PIECES = ["*", "*/3", "2", "1-3", "0,12", "2,3", "*/5", "9-17", "0-23/2", "1", "0", "1,2"]
DAY_PIECES = ["*", "*", "*", "1-31", "*/2", "L", "1-15", "28-31", "1,L", "8-31/3"]
MONTH_PIECES = ["*", "*", "*", "3,4,6,10,11", "*/3", "mar-nov"]
WEEKDAY_PIECES = ["*", "*", "*", "1-5", "0", "6,0", "mon-fri", "*/2", "0#1", "6L", "sat"]
ZONES = [*cron_reference.ZONES, "Pacific/Chatham"]
# Mid-window anchors near the 2026 transitions of the zones above (and one quiet day).
ANCHORS = [
    datetime(2026, 3, 29, 1, tzinfo=UTC),  # EU spring forward
    datetime(2026, 10, 25, 1, tzinfo=UTC),  # EU fall back
    datetime(2026, 3, 8, 7, tzinfo=UTC),  # US spring forward
    datetime(2026, 11, 1, 6, tzinfo=UTC),  # US fall back
    datetime(2026, 4, 4, 15, tzinfo=UTC),  # Lord Howe, Chatham, Santiago fall back
    datetime(2026, 10, 3, 15, tzinfo=UTC),  # Lord Howe spring forward
    datetime(2026, 9, 6, 4, tzinfo=UTC),  # Santiago spring forward
    datetime(2026, 6, 15, 12, tzinfo=UTC),
]
LOOKAHEADS = [timedelta(minutes=30), timedelta(hours=2), timedelta(hours=6)]

PIECES = (MINUTE_PIECES, HOUR_PIECES, DAY_PIECES, MONTH_PIECES, WEEKDAY_PIECES)
expressions = st.tuples(*(st.sampled_from(pieces) for pieces in PIECES)).map(" ".join)


async def fresh(database: Database) -> None:
    """Hypothesis reuses the test's database across examples: start each one empty."""
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            await conn.execute("TRUNCATE live_runs, finished_runs, run_keys, definitions")


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    expression=expressions,
    zone=st.sampled_from(ZONES),
    anchor=st.sampled_from(ANCHORS),
    # where the window starts, relative to the anchor, to the second
    lead=st.integers(min_value=0, max_value=int(WINDOW.total_seconds())),
    lookahead=st.sampled_from(LOOKAHEADS),
    # fractions of the lookahead the clock moves by, cycled
    steps=st.lists(st.floats(min_value=0.2, max_value=1.0), min_size=1, max_size=6),
    jitter=st.sampled_from([0, 1, 60, 3600]),
    policy=st.sampled_from(list(MissedRunPolicy)),
)
async def test_materialised_due_times_are_the_previewed_fire_times(
    database: Database,
    expression: str,
    zone: str,
    anchor: datetime,
    lead: int,
    lookahead: timedelta,
    steps: list[float],
    jitter: int,
    policy: MissedRunPolicy,
) -> None:
    try:
        schedule = CronSchedule.parse(expression, zone)
    except CronError:
        assume(False)
        raise AssertionError("unreachable") from None
    await fresh(database)
    start = anchor - timedelta(seconds=lead)
    end = start + WINDOW
    clock = FrozenClock(start)
    jobs = Jobs(database, clock)
    spec = JobSpec(
        schedule=Schedule(
            cron=expression, time_zone=zone, jitter_seconds=jitter, missed_run_policy=policy
        )
    )
    await jobs.put(TENANT, NAME, spec, "hypothesis")
    shard = jobs.shard_of(TENANT, NAME)

    async with database.connection(shard) as conn:
        sizes = itertools.cycle(steps)
        now = start
        while True:
            # Steps never exceed the lookahead, so no fire time is ever "missed".
            await materialiser.materialise_all(conn, now, lookahead=lookahead)
            if now >= end:
                break
            step = max(1.0, round(next(sizes) * lookahead.total_seconds()))
            now = min(end, now + timedelta(seconds=step))
        rows = await conn.fetch(
            "SELECT due_at, ready_at, origin FROM runs WHERE tenant = $1 AND job = $2 ORDER BY id",
            TENANT,
            NAME,
        )

    inserted = [row["due_at"] for row in rows]
    expected = schedule.between(start, end + lookahead)
    assert inserted == expected  # the same set, each once, in order
    assert all(a < b for a, b in itertools.pairwise(inserted))
    assert schedule.preview(start, min(25, len(expected))) == expected[:25]
    offset = timedelta(seconds=hashing.jitter_offset(TENANT, NAME, jitter))
    assert all(row["ready_at"] == row["due_at"] + offset for row in rows)
    assert {row["origin"] for row in rows} <= {"cron"}
    definition = (await jobs.get(TENANT, NAME)).definition
    assert definition.next_due_at == schedule.next_after(end + lookahead)
    assert definition.missed_dropped == 0
