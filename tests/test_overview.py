"""The dashboard's aggregates, merged across shards: the overview and the job table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickwork.core.clock import FrozenClock
from tickwork.core.records import Outcome
from tickwork.core.spec import JobSpec, Priority
from tickwork.engine import job_table, overview
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.store.database import Database

NOW = datetime(2026, 3, 15, 12, 0, 30, tzinfo=UTC)


async def test_the_overview_counts_one_tenant_per_minute(database: Database) -> None:
    clock = FrozenClock(NOW - timedelta(minutes=10))
    jobs, dispatcher = Jobs(database, clock), Dispatcher(database, clock)
    for tenant in ("acme", "globex"):
        for name in ("alpha", "beta", "gamma", "delta"):  # over several shards
            spec = JobSpec.model_validate({"priority": "critical", "retry": {"maxAttempts": 1}})
            await jobs.put(tenant, name, spec, "test")
    for name in ("alpha", "beta", "gamma", "delta"):
        await jobs.enqueue("acme", name, EnqueueRequest(), "test")
        await jobs.enqueue("globex", name, EnqueueRequest(), "test")
    clock.advance(2)  # every lease starts 2 s after its run was ready
    leases = await dispatcher.lease(
        ["default"], limit=10, worker_id="w", lease_seconds=30, tenant="acme"
    )
    assert len(leases) == 4
    clock.advance(60)
    outcomes = [Outcome.succeeded, Outcome.succeeded, Outcome.failed, Outcome.failed]
    await dispatcher.complete(
        [
            CompleteItem(lease.run_id, lease.fencing_token, outcome, {"message": "x"})
            for lease, outcome in zip(leases, outcomes, strict=True)
        ]
    )
    await jobs.enqueue("acme", "alpha", EnqueueRequest(), "test")  # waiting, ready
    clock.set(NOW)
    view = await overview.read(database, "acme", clock)

    assert view.now == NOW and len(view.minutes) == overview.WINDOW_MINUTES
    assert view.minutes[-1].at == NOW.replace(second=0)
    busy = {
        m.at: (m.started, m.succeeded, m.failed)
        for m in view.minutes
        if m.started or m.succeeded or m.failed
    }
    leased_at = (NOW - timedelta(minutes=10) + timedelta(seconds=2)).replace(second=0)
    finished_at = (NOW - timedelta(minutes=10) + timedelta(seconds=62)).replace(second=0)
    assert busy == {leased_at: (4, 0, 0), finished_at: (0, 2, 2)}
    assert view.dead == 2  # one attempt each: the failures are dead; globex's are not here
    assert [(b.queue, b.priority, b.ready) for b in view.backlog] == [
        ("default", Priority.critical, 1)
    ]
    assert view.backlog[0].oldest_age_seconds == pytest.approx(600 - 62, abs=1)
    critical = view.start_lag[0]
    assert critical.priority is Priority.critical and critical.leases == 4
    assert critical.p50_seconds == pytest.approx(2, rel=0.06)
    assert critical.p99_seconds == pytest.approx(2, rel=0.06)
    assert [lag.leases for lag in view.start_lag[1:]] == [0, 0]
    assert [s.owner for s in view.shards] == [None] * database.shard_count

    other = await overview.read(database, "globex", clock)
    assert other.ready == 4 and other.dead == 0
    assert not any(m.started for m in other.minutes)
    assert await overview.tenants(database) == ["acme", "globex"]


async def test_the_job_table_sorts_and_pages_the_same_across_shards(database: Database) -> None:
    jobs = Jobs(database, FrozenClock(NOW))
    zones = ["Europe/Berlin", "UTC", "Asia/Tokyo", None]
    names = [f"job-{i:02d}" for i in range(14)]
    for index, name in enumerate(names):
        zone = zones[index % 4]
        document: dict[str, object] = {"paused": index % 3 == 0, "queue": "q" + str(index % 2)}
        if zone is not None:
            document["schedule"] = {"cron": f"{index} 3 * * *", "timeZone": zone}
        await jobs.put("acme", name, JobSpec.model_validate(document), "test")
    await jobs.put("globex", "job-00", JobSpec(), "test")
    assert len({jobs.shard_of("acme", name) for name in names}) > 1

    async def names_of(**options: object) -> list[str]:
        query = job_table.Query(**options)  # type: ignore[arg-type]
        page = await job_table.page(database, "acme", query)
        return [view.definition.name for view in page.jobs]

    assert await names_of() == names
    assert await names_of(descending=True) == names[::-1]
    by_zone = await names_of(sort=job_table.Column.zone)
    with_zone = sorted(
        (n for i, n in enumerate(names) if zones[i % 4]),
        key=lambda n: (zones[names.index(n) % 4], n),
    )
    assert by_zone == with_zone + [n for i, n in enumerate(names) if zones[i % 4] is None]
    paused_first = await names_of(sort=job_table.Column.paused, descending=True)
    assert paused_first[:5] == [n for i, n in enumerate(names) if i % 3 == 0]
    pages = [await names_of(offset=offset, limit=4) for offset in range(0, 16, 4)]
    assert [n for page in pages for n in page] == names
    first = await job_table.page(database, "acme", job_table.Query(limit=4))
    assert first.total == len(names)
    assert await names_of(show=job_table.Show.paused) == [
        n for i, n in enumerate(names) if i % 3 == 0
    ]
    assert await names_of(contains="-1", queue="q1") == ["job-11", "job-13"]
