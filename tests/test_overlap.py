"""Overlap policies of scheduled fires (spec.overlapPolicy), on a real PostgreSQL.

Time is the injected ``FrozenClock``: the scheduler's pass materialises a fire a minute
ahead and decides it when its time comes; workers lease, heartbeat and complete through
the ``Dispatcher``. docs/scheduling.md ("Overlapping runs") states the rules checked here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from tickwork.api import render
from tickwork.core.clock import FrozenClock
from tickwork.core.records import Completed, Extended, Lease, Outcome, State
from tickwork.core.spec import JobSpec, MissedRunPolicy, OverlapPolicy, Retry, Schedule, parse
from tickwork.engine.dispatch import CompleteItem, Dispatcher, HeartbeatItem
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.metrics import JobLabels, Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.operator import status
from tickwork.store import definitions, sweeps
from tickwork.store.database import Database

TENANT = "acme"
ACTOR = "alice@example.com"
QUEUES = ["default"]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(f"2026-03-15T{text}+00:00").astimezone(UTC)


def hourly(
    policy: OverlapPolicy,
    *,
    missed: MissedRunPolicy = MissedRunPolicy.run_once,
    attempts: int = 3,
    deadline: int | None = None,
) -> JobSpec:
    return JobSpec(
        schedule=Schedule(
            cron="0 * * * *",
            jitter_seconds=0,
            missed_run_policy=missed,
            starting_deadline_seconds=deadline,
        ),
        overlap_policy=policy,
        retry=Retry(max_attempts=attempts, base_seconds=5, max_seconds=5),
        timeout_seconds=3 * 3600,
    )


@dataclass(frozen=True)
class RunRow:
    id: int
    due_at: datetime
    state: str
    origin: str
    attempt: int
    cancel_requested: bool
    lease_expires_at: datetime | None
    reason: str | None
    message: str | None


async def runs_of(database: Database, job: str) -> list[RunRow]:
    shard = database.shard_map.shard_of(TENANT, job)
    async with database.connection(shard) as conn:
        rows = await conn.fetch(
            """SELECT id, due_at, state, origin, attempt, cancel_requested, lease_expires_at,
                      last_error ->> 'reason' AS reason, last_error ->> 'message' AS message
               FROM runs WHERE tenant = $1 AND job = $2 ORDER BY due_at, id""",
            TENANT,
            job,
        )
    return [RunRow(**dict(row)) for row in rows]


def states(runs: list[RunRow]) -> list[tuple[str, str]]:
    return [(r.due_at.strftime("%H:%M"), r.state) for r in runs]


class Setup:
    def __init__(self, database: Database, clock: FrozenClock) -> None:
        self.database = database
        self.clock = clock
        self.jobs = Jobs(database, clock)
        self.metrics = Metrics(job_labels=JobLabels([f"{TENANT}/*"]))
        self.scheduler = Scheduler(database, clock=clock, metrics=self.metrics)
        self.dispatcher = Dispatcher(database, clock, random.Random(7))

    async def at(self, text: str) -> None:
        """Move the clock to ``text`` (UTC, today) and run one scheduler pass."""
        self.clock.set(utc(text))
        await self.scheduler.pass_once()

    async def lease(self, limit: int = 10, seconds: float = 7200) -> list[Lease]:
        """Leases long enough to outlast the next hourly fire."""
        return await self.dispatcher.lease(
            QUEUES, limit=limit, worker_id="w1", lease_seconds=seconds
        )

    async def complete(
        self, lease: Lease, outcome: Outcome = Outcome.succeeded
    ) -> Completed | Exception:
        error = None if outcome is Outcome.succeeded else {"message": "boom"}
        item = CompleteItem(lease.run_id, lease.fencing_token, outcome, error, True)
        [result] = await self.dispatcher.complete([item])
        return result

    async def heartbeat(self, lease: Lease, seconds: float = 30) -> Extended | Exception:
        [result] = await self.dispatcher.heartbeat(
            [HeartbeatItem(lease.run_id, lease.fencing_token, seconds)]
        )
        return result

    def counted(self, action: str, job: str) -> float:
        labels = {"tickwork_job": f"{TENANT}/{job}", "action": action}
        found = self.metrics.registry.get_sample_value("tickwork_overlap_runs_total", labels)
        return found or 0.0


@pytest.fixture
def setup(database: Database, clock: FrozenClock) -> Setup:
    return Setup(database, clock)


# --- the field -----------------------------------------------------------------------


def test_the_policy_defaults_to_allow_and_takes_the_three_cronjob_spellings() -> None:
    assert JobSpec().overlap_policy is OverlapPolicy.Allow
    assert JobSpec().to_document()["overlapPolicy"] == "Allow"
    for value in ("Allow", "Forbid", "Replace"):
        assert parse(JobSpec, {"overlapPolicy": value}).overlap_policy.value == value
    for wrong in ("forbid", "Skip", 1, None):
        with pytest.raises(ValidationError) as refused:
            parse(JobSpec, {"overlapPolicy": wrong})
        assert refused.value.errors()[0]["loc"] == ("overlapPolicy",)


# --- Forbid --------------------------------------------------------------------------


async def test_forbid_skips_a_fire_while_the_earlier_run_is_leased_and_counts_it(
    setup: Setup,
) -> None:
    await setup.jobs.put(TENANT, "report", hourly(OverlapPolicy.Forbid), ACTOR)
    await setup.at("01:59:30")
    await setup.at("02:00:00")
    [first] = await setup.lease()
    await setup.at("02:59:30")  # 03:00 materialised, still waiting for its time
    assert states(await runs_of(setup.database, "report")) == [
        ("02:00", "leased"),
        ("03:00", "scheduled"),
    ]
    await setup.at("03:00:00")
    runs = await runs_of(setup.database, "report")
    assert states(runs) == [("02:00", "leased"), ("03:00", "skipped")]
    skipped = runs[1]
    assert skipped.reason == sweeps.OVERLAP_FORBIDDEN
    assert skipped.message == (
        f"skipped: run {first.run_id} of the job was still leased (overlapPolicy Forbid)"
    )
    view = await setup.jobs.get(TENANT, "report")
    assert render.job(view)["overlapSkipped"] == 1
    assert setup.counted("skipped", "report") == 1
    shard = setup.jobs.shard_of(TENANT, "report")
    async with setup.database.connection(shard) as conn:
        [found] = await definitions.statuses(conn, shard, [(TENANT, "report")])
    assert status.run_fields(found)["overlapSkipped"] == 1  # the ScheduledJob's status
    # Nothing for a worker but the run it holds.
    assert await setup.lease() == []
    # A run enqueued through the API starts whatever the policy.
    enqueued, _ = await setup.jobs.enqueue(TENANT, "report", EnqueueRequest(), ACTOR)
    assert enqueued.state is State.ready
    [ad_hoc] = await setup.lease()
    assert await setup.complete(ad_hoc) == Completed(ad_hoc.id, State.succeeded, None)
    # Once the earlier run finished, the next fire runs.
    assert await setup.complete(first) == Completed(first.id, State.succeeded, None)
    await setup.at("03:59:30")
    await setup.at("04:00:00")
    assert states(await runs_of(setup.database, "report"))[-1] == ("04:00", "ready")
    assert render.job(await setup.jobs.get(TENANT, "report"))["overlapSkipped"] == 1


@pytest.mark.parametrize("earlier", ["ready", "retry_wait"])
async def test_forbid_counts_a_run_waiting_for_a_worker_or_for_its_retry_as_running(
    setup: Setup, earlier: str
) -> None:
    await setup.jobs.put(TENANT, "report", hourly(OverlapPolicy.Forbid), ACTOR)
    await setup.at("02:00:00")
    if earlier == "retry_wait":
        [lease] = await setup.lease()
        failed = await setup.complete(lease, Outcome.failed)
        assert isinstance(failed, Completed) and failed.state is State.retry_wait
    await setup.at("02:59:30")
    await setup.at("03:00:00")
    assert states(await runs_of(setup.database, "report"))[-1] == ("03:00", "skipped")
    if earlier == "retry_wait":
        # The retry is not a fire: it still runs, alone.
        await setup.at("03:00:10")
        assert states(await runs_of(setup.database, "report"))[0] == ("02:00", "ready")


async def caught_up(setup: Setup, policy: OverlapPolicy, until: str) -> list[tuple[str, str]]:
    """The (due, state) of each run of an hourly ``policy`` job that runs every missed
    fire, the scheduler's first pass being at ``until``."""
    spec = hourly(policy, missed=MissedRunPolicy.run_all)
    await setup.jobs.put(TENANT, "report", spec, ACTOR)
    await setup.at(until)
    return states(await runs_of(setup.database, "report"))


async def test_forbid_catching_up_runs_the_oldest_missed_fire_and_skips_the_others(
    setup: Setup,
) -> None:
    assert await caught_up(setup, OverlapPolicy.Forbid, "05:30:00") == [  # 02:00-05:00 missed
        ("02:00", "ready"),
        ("03:00", "skipped"),
        ("04:00", "skipped"),
        ("05:00", "skipped"),
    ]
    assert render.job(await setup.jobs.get(TENANT, "report"))["overlapSkipped"] == 3
    assert setup.counted("skipped", "report") == 3


async def test_forbid_leaves_a_fire_past_its_starting_deadline_to_the_deadline(
    setup: Setup,
) -> None:
    await setup.jobs.put(TENANT, "report", hourly(OverlapPolicy.Forbid, deadline=30), ACTOR)
    await setup.at("01:59:30")
    await setup.at("02:00:45")  # the scheduler was late: past the deadline
    [run] = await runs_of(setup.database, "report")
    assert (run.state, run.reason) == ("skipped", None)
    assert render.job(await setup.jobs.get(TENANT, "report"))["overlapSkipped"] == 0


# --- Replace -------------------------------------------------------------------------


async def test_replace_asks_the_leased_run_to_stop_and_starts_the_new_one(
    setup: Setup,
) -> None:
    await setup.jobs.put(TENANT, "report", hourly(OverlapPolicy.Replace), ACTOR)
    await setup.at("02:00:00")
    [old] = await setup.lease()
    await setup.at("02:59:30")
    await setup.at("03:00:00")
    runs = await runs_of(setup.database, "report")
    assert states(runs) == [("02:00", "leased"), ("03:00", "ready")]
    assert runs[0].cancel_requested and runs[0].reason == sweeps.OVERLAP_REPLACED
    assert not runs[1].cancel_requested
    assert setup.counted("replaced", "report") == 1
    [new] = await setup.lease()
    assert new.due_at == utc("03:00:00")
    # The old worker hears of it at its next heartbeat, and its lease is not extended.
    expires = runs[0].lease_expires_at
    setup.clock.advance(10)
    beat = await setup.heartbeat(old)
    assert isinstance(beat, Extended) and beat.cancel_requested
    assert beat.lease_expires_at == expires
    # Its completion records it cancelled, whatever the handler answered.
    assert await setup.complete(old) == Completed(old.id, State.cancelled, None)
    assert states(await runs_of(setup.database, "report")) == [
        ("02:00", "cancelled"),
        ("03:00", "leased"),
    ]


async def test_a_replaced_worker_that_does_not_stop_loses_its_lease_at_its_expiry(
    setup: Setup,
) -> None:
    spec = JobSpec(
        schedule=Schedule(cron="* * * * *", jitter_seconds=0),
        overlap_policy=OverlapPolicy.Replace,
    )
    await setup.jobs.put(TENANT, "minutely", spec, ACTOR)
    await setup.at("01:00:30")
    await setup.at("01:01:00")
    [old] = await setup.lease(seconds=100)  # until 01:02:40
    await setup.at("01:02:00")
    setup.clock.set(utc("01:02:20"))
    beat = await setup.heartbeat(old, seconds=100)
    assert isinstance(beat, Extended) and beat.cancel_requested
    assert beat.lease_expires_at == utc("01:02:40")
    await setup.at("01:02:41")  # the reaper: a cancelled run, not a retry
    assert states(await runs_of(setup.database, "minutely"))[:2] == [
        ("01:01", "cancelled"),
        ("01:02", "ready"),
    ]
    stale = await setup.complete(old)
    assert isinstance(stale, Exception)


async def test_replace_cancels_a_run_still_waiting_for_a_worker(setup: Setup) -> None:
    await setup.jobs.put(TENANT, "report", hourly(OverlapPolicy.Replace), ACTOR)
    await setup.at("02:00:00")
    await setup.at("02:59:30")
    await setup.at("03:00:00")
    runs = await runs_of(setup.database, "report")
    assert states(runs) == [("02:00", "cancelled"), ("03:00", "ready")]
    assert runs[0].reason == sweeps.OVERLAP_REPLACED
    assert runs[0].message is not None and "replaced by run r" in runs[0].message
    [lease] = await setup.lease()
    assert lease.due_at == utc("03:00:00")


async def test_replace_catching_up_starts_only_the_latest_missed_fire(setup: Setup) -> None:
    assert await caught_up(setup, OverlapPolicy.Replace, "04:30:00") == [  # 02:00-04:00 missed
        ("02:00", "cancelled"),
        ("03:00", "cancelled"),
        ("04:00", "ready"),
    ]


# --- Allow, and cancels in general ----------------------------------------------------


async def test_allow_starts_every_fire_as_before(setup: Setup) -> None:
    await setup.jobs.put(TENANT, "report", hourly(OverlapPolicy.Allow), ACTOR)
    await setup.at("02:00:00")
    await setup.lease()
    await setup.at("02:59:30")
    await setup.at("03:00:00")
    assert states(await runs_of(setup.database, "report")) == [
        ("02:00", "leased"),
        ("03:00", "ready"),
    ]
    assert render.job(await setup.jobs.get(TENANT, "report"))["overlapSkipped"] == 0


async def test_a_heartbeat_after_any_cancel_answers_it_without_extending(setup: Setup) -> None:
    await setup.jobs.put(TENANT, "adhoc", JobSpec(), ACTOR)
    run, _ = await setup.jobs.enqueue(TENANT, "adhoc", EnqueueRequest(), ACTOR)
    [lease] = await setup.lease(seconds=30)
    setup.clock.advance(10)
    beat = await setup.heartbeat(lease)
    assert isinstance(beat, Extended) and not beat.cancel_requested
    extended = beat.lease_expires_at
    assert extended == setup.clock.now() + timedelta(seconds=30)
    await setup.jobs.cancel(run.run_id, ACTOR)
    setup.clock.advance(10)
    beat = await setup.heartbeat(lease)
    assert isinstance(beat, Extended) and beat.cancel_requested
    assert beat.lease_expires_at == extended
