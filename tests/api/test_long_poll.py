"""Long-poll leases: a waiting worker gets a run as soon as it is ready, and an idle one
gets an empty answer after waitSeconds."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from conftest import ApiServer

from tickwork.core.clock import FrozenClock
from tickwork.engine.scheduler import Scheduler
from tickwork.store.wakeup import Waiter

# One TLS context for every client: httpx would load the CA bundle per client otherwise.
TLS = ssl.create_default_context()


def client(api_server: ApiServer, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(token), verify=TLS, timeout=30
    )


@pytest.fixture
def waiting(api_server: ApiServer, monkeypatch: pytest.MonkeyPatch) -> asyncio.Queue[Waiter]:
    """A test signal: every long-poll that starts waiting puts its waiter here."""
    signal = api_server.services.dispatcher.wakeups
    original = signal.waiter
    started: asyncio.Queue[Waiter] = asyncio.Queue()

    @contextlib.asynccontextmanager
    async def spied(queues: Iterable[str]) -> AsyncIterator[Waiter]:
        async with original(queues) as waiter:
            started.put_nowait(waiter)
            yield waiter

    monkeypatch.setattr(signal, "waiter", spied)
    return started


async def timed_lease(
    worker: httpx.AsyncClient, body: dict[str, Any]
) -> tuple[float, list[dict[str, Any]]]:
    response = await worker.post("/v1/lease", json=body)
    answered = time.perf_counter()
    assert response.status_code == 200, response.text
    return answered, response.json()["leases"]


async def test_a_waiting_lease_returns_as_soon_as_a_run_is_enqueued(
    api_server: ApiServer, waiting: asyncio.Queue[Waiter]
) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/urgent", json={"priority": "critical"})).status_code == 201
        async with client(api_server, api_server.worker_token) as worker:
            started = time.perf_counter()
            polling = asyncio.create_task(
                timed_lease(worker, {"queues": ["default"], "waitSeconds": 5})
            )
            await asyncio.wait_for(waiting.get(), 5)  # the lease is now waiting
            assert not polling.done()
            response = await team.post("/v1/jobs/urgent/runs", json={"payload": {"n": 1}})
            enqueued = time.perf_counter()
            assert response.status_code == 201
            answered, leases = await asyncio.wait_for(polling, 6)
    assert [item["runId"] for item in leases] == [response.json()["runId"]]
    assert leases[0]["payload"] == {"n": 1}
    # Woken by the notification, not by the 5 s recheck; the margin is for a busy machine
    # (the wake-up's latency is measured in make bench, not here).
    assert answered - enqueued < 0.5, f"lease answered {answered - enqueued:.3f}s after enqueue"
    assert answered - started < 5


async def test_an_idle_lease_returns_empty_after_wait_seconds(
    api_server: ApiServer, waiting: asyncio.Queue[Waiter]
) -> None:
    async with client(api_server, api_server.worker_token) as worker:
        started = time.perf_counter()
        answered, leases = await timed_lease(worker, {"queues": ["default"], "waitSeconds": 0.3})
    assert leases == []
    # Answered at its wait, not at the 5 s recheck (the margin is for a busy machine).
    assert 0.29 <= answered - started < 2.5, answered - started
    assert waiting.qsize() == 1


async def test_a_run_in_another_queue_does_not_end_the_wait(
    api_server: ApiServer, waiting: asyncio.Queue[Waiter]
) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/invoices", json={"queue": "billing"})).status_code == 201
        async with client(api_server, api_server.worker_token) as worker:
            started = time.perf_counter()
            polling = asyncio.create_task(
                timed_lease(worker, {"queues": ["default"], "waitSeconds": 0.3})
            )
            await asyncio.wait_for(waiting.get(), 5)
            assert (await team.post("/v1/jobs/invoices/runs")).status_code == 201
            answered, leases = await asyncio.wait_for(polling, 5)
            assert leases == []
            assert answered - started >= 0.29
            # The billing run is still there for a worker of that queue.
            _, billing = await timed_lease(worker, {"queues": ["billing"]})
            assert len(billing) == 1


async def test_the_due_flip_wakes_a_waiting_lease(
    api_server: ApiServer, waiting: asyncio.Queue[Waiter]
) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/jobs/later", json={})).status_code == 201
        run = (await team.post("/v1/jobs/later/runs", json={"delaySeconds": 3600})).json()
    assert run["state"] == "scheduled"
    # A scheduler whose clock is an hour and a bit ahead finds the run due now.
    ahead = Scheduler(
        api_server.database, clock=FrozenClock(datetime.now(UTC) + timedelta(seconds=3700))
    )
    async with client(api_server, api_server.worker_token) as worker:
        polling = asyncio.create_task(
            timed_lease(worker, {"queues": ["default"], "waitSeconds": 5})
        )
        await asyncio.wait_for(waiting.get(), 5)
        await ahead.pass_once()
        flipped = time.perf_counter()
        answered, leases = await asyncio.wait_for(polling, 6)
    assert [item["runId"] for item in leases] == [run["runId"]]
    # Woken by the flip's notification, not by the 5 s recheck (margin: a busy machine).
    assert answered - flipped < 1.0, answered - flipped
