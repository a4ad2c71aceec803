"""What the scheduler reports about its shards (the canary, the ready backlog, dead runs
and lease expiries per job, with bounded labels), and the
JSON log format."""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import pydantic
import pytest

from tickwork.cli import options
from tickwork.core.clock import FrozenClock
from tickwork.core.records import Outcome, State
from tickwork.core.settings import LogSettings, Settings
from tickwork.core.spec import JobSpec, Priority, Retry
from tickwork.engine import canary
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.metrics import JobLabels, Metrics
from tickwork.engine.observer import SETTLE, ShardObserver
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

ACTOR = "alice@example.com"


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    value: float | None = metrics.registry.get_sample_value(name, labels)
    return value


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(job_labels=JobLabels(["payments/*"], limit=2))


@pytest.fixture
def scheduler(database: Database, clock: FrozenClock, metrics: Metrics) -> Scheduler:
    return Scheduler(database, clock=clock, metrics=metrics, observer=ShardObserver(metrics))


def canaries_of(found: list[Any]) -> list[Any]:
    return [lease for lease in found if lease.tenant == canary.TENANT]


async def test_one_canary_per_shard_and_minute_completed_by_a_dispatcher(
    database: Database, clock: FrozenClock, scheduler: Scheduler, metrics: Metrics
) -> None:
    await scheduler.pass_once()
    await scheduler.pass_once()  # the same minute: nothing new
    # A replica that takes the shards over in the same minute makes none either; it
    # reports from then on (the first one is deposed by the takeover).
    twin = Scheduler(database, clock=clock, metrics=metrics, observer=ShardObserver(metrics))
    await twin.pass_once()
    dispatcher = Dispatcher(database, clock)
    granted = await dispatcher.lease(
        [canary.QUEUE], limit=100, worker_id="canary", lease_seconds=30, tenant=canary.TENANT
    )
    assert sorted(lease.shard for lease in granted) == list(range(database.shard_count))
    assert all(lease.priority == Priority.critical.rank for lease in granted)
    await dispatcher.release(granted)

    clock.advance(3)
    assert await canary.complete_ready(dispatcher, "canary") == database.shard_count
    clock.advance(60)
    await twin.pass_once()
    for shard in range(database.shard_count):
        assert sample(metrics, "tickwork_canary_missed", shard=str(shard)) == 0
        assert sample(metrics, "tickwork_canary_lag_seconds", shard=str(shard)) == 3
        assert sample(metrics, "tickwork_canary_runs_total", shard=str(shard)) == 2


async def test_canaries_nobody_completes_are_missed_in_a_row(
    database: Database, clock: FrozenClock, scheduler: Scheduler, metrics: Metrics
) -> None:
    dispatcher = Dispatcher(database, clock)
    await scheduler.pass_once()
    clock.advance(1)
    await canary.complete_ready(dispatcher, "canary")  # minute 0 succeeds
    for _ in range(1, 4):  # no dispatcher completes minutes 1..3
        clock.advance(60)
        await scheduler.pass_once()
    clock.advance(60)
    await scheduler.pass_once()
    # Judged: minutes 3, 2, 1 missed (their grace is over), 0 succeeded.
    assert sample(metrics, "tickwork_canary_missed", shard="0") == 3
    assert sample(metrics, "tickwork_canary_lag_seconds", shard="0") == 1
    await canary.complete_ready(dispatcher, "canary")  # minute 4 (and late ones) now
    clock.advance(60)
    await scheduler.pass_once()
    assert sample(metrics, "tickwork_canary_missed", shard="0") == 0


def test_a_new_owner_judges_only_the_minutes_it_owned() -> None:
    start = datetime(2026, 3, 15, 1, 0, 30, tzinfo=UTC)  # took the shard over mid-minute
    assert canary.judge([], start + timedelta(seconds=60), start) == canary.Status(None, 1)
    assert canary.judge([], start + timedelta(seconds=29), start) == canary.Status(None, 0)


async def spec_job(jobs: Jobs, tenant: str, name: str, **kwargs: Any) -> None:
    spec = JobSpec(
        queue="work",
        priority=kwargs.get("priority", Priority.critical),
        retry=Retry(max_attempts=1, base_seconds=1, max_seconds=1),
        timeout_seconds=60,
    )
    await jobs.put(tenant, name, spec, ACTOR)


async def test_backlog_per_queue_and_its_oldest_run(
    database: Database, clock: FrozenClock, scheduler: Scheduler, metrics: Metrics
) -> None:
    jobs = Jobs(database, clock)
    await spec_job(jobs, "payments", "settle")
    for _ in range(3):
        await jobs.enqueue("payments", "settle", EnqueueRequest(), ACTOR)
    clock.advance(20)
    await scheduler.pass_once()
    ready = [
        sample(
            metrics,
            "tickwork_ready_runs",
            shard=str(s),
            tenant="payments",
            queue="work",
            priority="critical",
        )
        for s in range(database.shard_count)
    ]
    assert sum(r or 0 for r in ready) == 3
    [shard] = [s for s, r in enumerate(ready) if r]
    labels = {"shard": str(shard), "tenant": "payments", "queue": "work", "priority": "critical"}
    assert sample(metrics, "tickwork_oldest_ready_seconds", **labels) == 20

    granted = await Dispatcher(database, clock).lease(
        ["work"], limit=3, worker_id="w", lease_seconds=30
    )
    assert len(granted) == 3
    clock.advance(15)
    await scheduler.pass_once()
    assert sample(metrics, "tickwork_ready_runs", **labels) is None  # emptied: no series


async def fail_all(dispatcher: Dispatcher, queue: str, count: int) -> None:
    granted = await dispatcher.lease([queue], limit=count, worker_id="w", lease_seconds=30)
    assert len(granted) == count
    results = await dispatcher.complete(
        [CompleteItem(g.run_id, g.fencing_token, Outcome.failed, {"message": "x"}) for g in granted]
    )
    assert all(getattr(r, "state", None) is State.dead for r in results), results


async def test_dead_runs_and_lease_expiries_per_opted_in_job_once(
    database: Database, clock: FrozenClock, scheduler: Scheduler, metrics: Metrics
) -> None:
    jobs = Jobs(database, clock)
    dispatcher = Dispatcher(database, clock)
    for tenant, name in (
        ("payments", "settle"),
        ("payments", "refund"),
        ("payments", "x"),
        ("team-b", "noise"),
    ):
        await spec_job(jobs, tenant, name)
        await jobs.enqueue(tenant, name, EnqueueRequest(), ACTOR)
        await jobs.enqueue(tenant, name, EnqueueRequest(), ACTOR)
    await scheduler.pass_once()  # the observer starts watching now
    await fail_all(dispatcher, "work", 8)
    for _ in range(3):  # counted once, however many passes see them
        clock.advance(SETTLE.total_seconds() + 15)
        await scheduler.pass_once()
    dead = {
        job: sample(metrics, "tickwork_dead_runs_total", tickwork_job=job, priority="critical")
        for job in ("payments/settle", "payments/refund", "payments/x", "team-b/noise", "_other")
    }
    # Two opted-in jobs at most (limit=2): the first two seen; the rest are _other.
    assert sum(v or 0 for v in dead.values()) == 8
    assert dead["team-b/noise"] is None
    assert sorted(v for k, v in dead.items() if k != "_other" and v) == [2, 2]
    assert dead["_other"] == 4

    await jobs.enqueue("payments", "settle", EnqueueRequest(), ACTOR)
    [lease] = await dispatcher.lease(["work"], limit=1, worker_id="w", lease_seconds=5)
    clock.advance(6)
    await scheduler.pass_once()
    expired = sample(
        metrics,
        "tickwork_lease_expiries_total",
        tickwork_job=metrics.job_label("payments", "settle"),
        priority="critical",
    )
    assert expired == 1
    assert lease.job == "settle"


def test_job_labels_are_bounded() -> None:
    labels = JobLabels(["a/*"], limit=2)
    assert [labels("a", "1"), labels("a", "2"), labels("a", "3"), labels("b", "1")] == [
        "a/1",
        "a/2",
        "_other",
        "_other",
    ]
    assert labels("a", "1") == "a/1"  # a chosen job keeps its series
    assert JobLabels()("a", "1") == "_other"  # nobody opted in: one series in all


def test_json_logs_carry_the_action_key(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level

    class RoleSettings(Settings):
        log: LogSettings = LogSettings()

    @click.command()
    @options.settings_options(RoleSettings)
    def role(**given: Any) -> None:
        options.configure_logging(options.load(RoleSettings, given).log)
        logging.getLogger("tickwork.test").warning(
            "shard %d lost", 3, extra={"action": "shard-lost", "shard": 3}
        )

    try:
        with pytest.raises(SystemExit) as ended:
            role.main(["--log-format", "json", "--log-level", "WARNING"])
        assert ended.value.code == 0
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    [line] = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["message"] == "shard 3 lost"
    assert (record["action"], record["shard"], record["level"]) == ("shard-lost", 3, "WARNING")
    assert record["logger"] == "tickwork.test" and record["time"]


def test_the_text_format_is_the_default_and_others_are_refused() -> None:
    assert LogSettings().format == "text"
    assert LogSettings(level="warning").level == "WARNING"
    with pytest.raises(pydantic.ValidationError):
        LogSettings(format="xml")  # type: ignore[arg-type]
