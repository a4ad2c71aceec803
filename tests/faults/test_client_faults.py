"""``tickwork.client`` through a database restart: the enqueue answered ``503
store-unavailable`` is repeated after its ``Retry-After`` with the same idempotency
key, and makes one run."""

from __future__ import annotations

import logging

import httpx
import pytest
from conftest import TEAM_TOKEN
from polling import eventually

from faults.conftest import proxied_map, serving
from faults.proxy import TcpProxy
from tickwork.client import AsyncClient
from tickwork.core.spec import JobSpec


async def test_an_enqueue_through_a_database_restart_is_retried_and_makes_one_run(
    fault_url: str, proxies: list[TcpProxy], caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(proxied_map(fault_url, proxies)) as api:
        await api.services.jobs.put("acme", "report", JobSpec(), "test")
        for proxy in proxies:  # restarted: open links gone, new ones told "starting up"
            proxy.reset()
            proxy.starting_up()
        waits: list[float] = []

        async def sleep(seconds: float) -> None:
            """The database is back by the time the client tries again."""
            waits.append(seconds)
            for proxy in proxies:
                proxy.heal()
            async with httpx.AsyncClient(base_url=api.url) as http:
                await eventually(lambda: _ready(http), within=5, what="the API ready again")

        async with AsyncClient(api.url, TEAM_TOKEN, sleep=sleep) as client:
            with caplog.at_level(logging.WARNING, "tickwork.client"):
                run = await client.enqueue("report", {"n": 1})
        [retry] = [r for r in caplog.records if getattr(r, "action", "") == "client-retry"]
        assert "503 store-unavailable" in retry.getMessage()
        assert run.created and len(waits) == 1
        assert waits[0] >= 1  # the answer's Retry-After
        runs, _ = await api.services.jobs.runs_of_job("acme", "report", None, None, 10)
        assert [r.run_id for r in runs] == [run.run_id]


async def _ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).json()["status"] == "ready"
