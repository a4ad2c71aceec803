"""Long-poll leases: a waiting worker gets a run as soon as it is ready, and an idle one
gets an empty answer after waitSeconds.

The end of each wait is watched (``api.clients.Waiting``): a wake-up ends a wait at once,
whereas a wait that runs out is what a lost notification leaves to the recheck. How soon
a woken lease answers is measured by make bench, not here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from conftest import ApiServer

from api.clients import Waiting, client, long_poll, spy_on_waiters
from tickwork.core.clock import FrozenClock
from tickwork.engine.scheduler import Scheduler


@pytest.fixture
def waiting(api_server: ApiServer, monkeypatch: pytest.MonkeyPatch) -> asyncio.Queue[Waiting]:
    """Every long-poll that starts waiting puts its waiter here, watched."""
    return spy_on_waiters(api_server.services.dispatcher.wakeups, monkeypatch)


@pytest.fixture
async def team(api_server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with client(api_server, api_server.team_token, timeout=30) as http:
        yield http


@pytest.fixture
async def worker(api_server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with client(api_server, api_server.worker_token, timeout=30) as http:
        yield http


def leases_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    leases: list[dict[str, Any]] = response.json()["leases"]
    return leases


async def test_a_waiting_lease_returns_as_soon_as_a_run_is_enqueued(
    team: httpx.AsyncClient, worker: httpx.AsyncClient, waiting: asyncio.Queue[Waiting]
) -> None:
    assert (await team.put("/v1/jobs/urgent", json={"priority": "critical"})).status_code == 201
    polling, watched = await long_poll(worker, waiting, queues=["default"], waitSeconds=5)
    assert not polling.done()
    response = await team.post("/v1/jobs/urgent/runs", json={"payload": {"n": 1}})
    assert response.status_code == 201
    leases = leases_of(await asyncio.wait_for(polling, 6))
    assert [item["runId"] for item in leases] == [response.json()["runId"]]
    assert leases[0]["payload"] == {"n": 1}
    # Woken by the notification, not answered by the 5 s recheck.
    assert watched.wakes == [True], watched.waits


async def test_an_idle_lease_returns_empty_after_wait_seconds(
    worker: httpx.AsyncClient, waiting: asyncio.Queue[Waiting]
) -> None:
    answer = await worker.post("/v1/lease", json={"queues": ["default"], "waitSeconds": 0.3})
    leases = leases_of(answer)
    assert leases == []
    assert waiting.qsize() == 1
    watched = waiting.get_nowait()
    # It waited out its waitSeconds, not the 5 s of the recheck.
    assert watched.wakes == [False], watched.waits
    assert all(seconds <= 0.3 for seconds, _ in watched.waits), watched.waits


async def test_a_run_in_another_queue_does_not_end_the_wait(
    team: httpx.AsyncClient, worker: httpx.AsyncClient, waiting: asyncio.Queue[Waiting]
) -> None:
    assert (await team.put("/v1/jobs/invoices", json={"queue": "billing"})).status_code == 201
    polling, watched = await long_poll(worker, waiting, queues=["default"], waitSeconds=0.3)
    assert (await team.post("/v1/jobs/invoices/runs")).status_code == 201
    assert leases_of(await asyncio.wait_for(polling, 5)) == []
    # Not woken: it waited out its waitSeconds.
    assert watched.wakes == [False], watched.waits
    # The billing run is still there for a worker of that queue.
    assert len(leases_of(await worker.post("/v1/lease", json={"queues": ["billing"]}))) == 1


async def test_the_due_flip_wakes_a_waiting_lease(
    api_server: ApiServer,
    team: httpx.AsyncClient,
    worker: httpx.AsyncClient,
    waiting: asyncio.Queue[Waiting],
) -> None:
    assert (await team.put("/v1/jobs/later", json={})).status_code == 201
    run = (await team.post("/v1/jobs/later/runs", json={"delaySeconds": 3600})).json()
    assert run["state"] == "scheduled"
    # A scheduler whose clock is an hour and a bit ahead finds the run due now.
    ahead = Scheduler(
        api_server.database, clock=FrozenClock(datetime.now(UTC) + timedelta(seconds=3700))
    )
    polling, watched = await long_poll(worker, waiting, queues=["default"], waitSeconds=5)
    await ahead.pass_once()
    leases = leases_of(await asyncio.wait_for(polling, 6))
    assert [item["runId"] for item in leases] == [run["runId"]]
    # Woken by the flip's notification, not answered by the 5 s recheck.
    assert watched.wakes == [True], watched.waits
