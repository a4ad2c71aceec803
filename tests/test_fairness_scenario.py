"""The fairness scenario, scaled down to seconds: tenant A floods bulk runs of a slow
job that keeps its workers busy (concurrency 4 of a pool of 6); tenant B enqueues
critical runs 10 a second. The flood never holds more than its 4 slots, and every B run
starts while the flood's backlog still waits: B is not queued behind it. Real HTTP, the
worker SDK, real PostgreSQL.

B's start lag, and how it compares with its lag without the flood, are measured by
make bench at full scale (fairness_b_p99_lag_s, fairness_b_vs_no_flood): timings taken
here, on a machine busy with other tests, would say little."""

from __future__ import annotations

import asyncio
import contextlib

from api.clients import client
from conftest import ADMIN_TOKEN, ApiServer
from polling import eventually

from tickwork.worker import RunContext, Worker

FLOOD = 2_000
B_RUNS = 20


async def test_a_flood_of_bulk_runs_does_not_hold_up_another_tenants_critical_runs(
    api_server: ApiServer,
) -> None:
    async with (
        client(api_server, api_server.other_team_token) as a,
        client(api_server, api_server.team_token) as b,
    ):
        await a.put("/v1/jobs/slow", json={"priority": "bulk", "concurrency": 4})
        await b.put("/v1/jobs/urgent", json={"priority": "critical"})
        for _ in range(FLOOD // 1000):
            answer = await a.post("/v1/jobs/slow/runs:batch", json={"runs": [{}] * 1000})
            assert answer.status_code == 200, answer.text

        slow_started = slow_running = slow_most = 0
        holding = asyncio.Event()
        urgent_started: set[str] = set()

        async def slow(_context: RunContext) -> None:
            nonlocal slow_started, slow_running, slow_most
            slow_started += 1
            slow_running += 1
            slow_most = max(slow_most, slow_running)
            if slow_running >= 4:
                holding.set()
            try:
                await asyncio.sleep(0.3)  # a slow job: the workers it holds are the point
            finally:
                slow_running -= 1

        async def urgent(context: RunContext) -> None:
            urgent_started.add(context.run_id)

        worker = Worker(
            api_server.url, ADMIN_TOKEN, queues=["default"], concurrency=6, wait_seconds=2
        )
        worker.register(slow, job="slow")
        worker.register(urgent, job="urgent")
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(holding.wait(), 10)  # the flood holds its four slots
            loop = asyncio.get_running_loop()
            started = loop.time()
            ids = set()
            for n in range(B_RUNS):
                # B's pace, 10 a second, as in the scenario.
                await asyncio.sleep(max(0.0, started + n / 10 - loop.time()))
                answer = await b.post("/v1/jobs/urgent/runs", json={})
                assert answer.status_code == 201, answer.text
                ids.add(answer.json()["runId"])
            # Behind the flood's backlog they would start minutes from now.
            await eventually(lambda: urgent_started == ids, what="every B run started")
            flood_started_by_then = slow_started
        finally:
            worker.stop(force=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
    assert flood_started_by_then < FLOOD // 2, flood_started_by_then
    assert slow_most == 4, slow_most
