"""The dashboard: how long its pages take to render with a full database.

``dashboard``: 10 000 jobs and 100 000 runs of one tenant on 4 shards, made through
the engine (so the data has the shape the store gives it: an hour of leases and
completions from a clock moved minute by minute, 5 % of the runs dead, some leased,
some ready). The API serves the dashboard on 127.0.0.1; a signed-in client asks for the
overview page (the target: under 300 ms), the jobs table sorted by next run, and the
DLQ, and the render times are reported (the server's time, from request to the last
byte; the client runs in the same process). ``TICKWORK_BENCH_SCALE`` multiplies N.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from datetime import UTC, datetime, timedelta

import httpx

from bench import Context, Row, Table, register
from bench.harness import scaled
from tickwork.api.app import create_app
from tickwork.api.auth import Role, StaticTokens, TokenEntry
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.core.clock import FrozenClock
from tickwork.core.records import Outcome
from tickwork.core.settings import ApiSettings, PoolSettings
from tickwork.core.spec import JobSpec
from tickwork.engine import overview
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

SHARDS = 4
JOBS = 10_000
RUNS = 100_000
TENANT = "acme"
TOKEN = "bench-dashboard-token-0123456789"  # noqa: S105 - a local test token
RENDERS = 30
TARGET_MS = 300.0
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


async def _seed(database: Database, jobs_count: int, runs_count: int) -> dict[str, int]:
    now = datetime.now(UTC).replace(microsecond=0)
    clock = FrozenClock(now - timedelta(minutes=61))
    jobs, dispatcher = Jobs(database, clock), Dispatcher(database, clock)
    names = [f"job-{n:05d}" for n in range(jobs_count)]
    gate = asyncio.Semaphore(12)
    crons = ["*/5 * * * *", "30 2 * * *", "0 * * * *", "15 9 * * 1-5"]
    zones = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"]

    async def put(index: int, name: str) -> None:
        spec = JobSpec.model_validate(
            {
                "schedule": {"cron": crons[index % 4], "timeZone": zones[index % 4]},
                "priority": ("critical", "default", "bulk")[index % 3],
                "retry": {"maxAttempts": 1},
                "paused": index % 50 == 0,
            }
        )
        async with gate:
            await jobs.put(TENANT, name, spec, "bench")

    await asyncio.gather(*(put(i, name) for i, name in enumerate(names)))
    per_job = max(1, runs_count // jobs_count)

    async def enqueue(name: str) -> None:
        async with gate:
            await jobs.enqueue_many(TENANT, name, [EnqueueRequest()] * per_job, "bench")

    await asyncio.gather(*(enqueue(name) for name in names))
    total = per_job * jobs_count
    # An hour of work: 85 % of the runs leased and completed minute by minute (one in
    # sixteen fails for good), 5 % left leased, the rest left ready.
    finished_target = int(total * 0.85)
    per_minute = finished_target // 60 + 1
    done = dead = 0
    for minute in range(60):
        clock.set(now - timedelta(minutes=60 - minute))
        taken = 0
        while taken < per_minute and done < finished_target:
            leases = await dispatcher.lease(
                ["default"], limit=100, worker_id="bench-worker", lease_seconds=600, tenant=TENANT
            )
            if not leases:
                break
            clock.advance(0.5)
            items = [
                CompleteItem(
                    lease.run_id,
                    lease.fencing_token,
                    Outcome.failed if lease.fencing_token % 16 == 0 else Outcome.succeeded,
                    {"message": "bench failure"} if lease.fencing_token % 16 == 0 else None,
                )
                for lease in leases
            ]
            dead += sum(1 for item in items if item.outcome is Outcome.failed)
            await dispatcher.complete(items)
            taken += len(leases)
            done += len(leases)
    clock.set(now - timedelta(seconds=30))
    leased = 0
    while leased < int(total * 0.05):
        got = await dispatcher.lease(
            ["default"], limit=100, worker_id="bench-worker", lease_seconds=3600, tenant=TENANT
        )
        if not got:
            break
        leased += len(got)
    return {"jobs": jobs_count, "runs": total, "finished": done, "dead": dead, "leased": leased}


async def _sign_in(client: httpx.AsyncClient) -> None:
    form = await client.get("/ui/login")
    csrf = _CSRF.search(form.text)
    assert csrf is not None
    answer = await client.post("/ui/login", data={"token": TOKEN, "csrf": csrf.group(1)})
    assert answer.status_code == 303, answer.text


async def _timed(client: httpx.AsyncClient, path: str, count: int) -> list[float]:
    await client.get(path)  # warm: prepared statements, template compilation
    times = []
    for _ in range(count):
        started = time.perf_counter()
        response = await client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return times


@register("dashboard", "dashboard pages with 10 000 jobs and 100 000 runs (overview < 300 ms)")
async def dashboard(context: Context) -> list[Table]:
    shard_map = await context.migrate(SHARDS)
    jobs_count = scaled(JOBS, least=10)
    runs_count = scaled(RUNS, least=100)
    renders = scaled(RENDERS, least=3)
    # A dispatcher's pools; the long waits are for the seeding, whose writers queue
    # for connections on a busy machine longer than a role's request would.
    async with Database(
        shard_map, PoolSettings(max_size=4, acquire_timeout=60.0, connect_timeout=60.0)
    ) as database:
        started = time.perf_counter()
        made = await _seed(database, jobs_count, runs_count)
        seeded = time.perf_counter() - started
        for shard in shard_map.shards:
            # A database in its steady state: vacuumed, so autovacuum does not run
            # during the measurement and index-only scans see the visibility map.
            async with database.connection(shard.number) as conn:
                await conn.execute("VACUUM ANALYZE")
        services = Services(
            engine=Installation.over(database),
            authenticator=StaticTokens(
                [TokenEntry(token=TOKEN, tenant=TENANT, role=Role.team, name="bench")]
            ),
            metrics=Metrics(),
            settings=ApiSettings(),
        )
        server = HttpServer(create_app(services), port=0)
        url = await server.start()
        rows: list[Row] = []
        try:
            engine_times = []
            for _ in range(10):
                begun = time.perf_counter()
                await overview.read(database, TENANT)
                engine_times.append((time.perf_counter() - begun) * 1000)
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                await _sign_in(client)
                for label, path in [
                    ("overview", "/ui/"),
                    ("overview (live refresh)", "/ui/#live"),
                    ("jobs, by next run", "/ui/jobs?sort=next"),
                    ("jobs, filtered", "/ui/jobs?q=job-01&show=dead"),
                    ("DLQ", "/ui/dlq"),
                ]:
                    headers = {"X-Tickwork-Live": "1"} if "live" in label else {}
                    client.headers.update(headers)
                    times = await _timed(client, path.split("#")[0], renders)
                    for name in headers:
                        del client.headers[name]
                    rows.append(
                        {
                            "page": label,
                            "renders": len(times),
                            "p50 ms": statistics.median(times),
                            "p95 ms": sorted(times)[int(len(times) * 0.95) - 1],
                            "max ms": max(times),
                        }
                    )
        finally:
            await server.stop()
    overview_p50 = rows[0]["p50 ms"]
    verdict = "meets" if overview_p50 < TARGET_MS else "MISSES"
    notes = [
        f"{made['jobs']:,} jobs, {made['runs']:,} runs ({made['finished']:,} finished in the "
        f"last hour, {made['dead']:,} dead, {made['leased']:,} leased), {SHARDS} shards; "
        f"seeded in {seeded:.0f} s",
        f"engine overview.read alone: p50 {statistics.median(engine_times):.0f} ms",
        f"overview p50 {overview_p50:.0f} ms: {verdict} the {TARGET_MS:.0f} ms target",
    ]
    return [Table("dashboard page renders", rows, notes)]
