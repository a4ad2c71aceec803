"""A long-poll whose worker went away gives its leases back instead of stranding them."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from conftest import ApiServer
from polling import eventually

from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest


async def test_runs_claimed_for_a_vanished_long_poll_are_released(api_server: ApiServer) -> None:
    await api_server.jobs.put("acme", "report", JobSpec(queue="billing"), "test")
    worker = api_server.headers(api_server.worker_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=worker) as client:
        # A first look opens the claim connections: the abandoned poll below must be
        # waiting before its client gives up, not still connecting on a busy machine.
        warm = await client.post("/v1/lease", json={"queues": ["billing"], "max": 1})
        assert warm.json()["leases"] == []
        abandoned = asyncio.create_task(
            client.post(
                "/v1/lease",
                json={"queues": ["billing"], "waitSeconds": 10, "max": 1},
                timeout=0.3,
            )
        )
        with contextlib.suppress(httpx.TimeoutException):
            await abandoned
        # The server-side poll is still waiting; this run wakes it, it claims the run,
        # finds its client gone and must give the run back.
        run, _ = await api_server.jobs.enqueue("acme", "report", EnqueueRequest(), "test")

        async def given_back() -> bool:
            current, _ = await api_server.jobs.run(run.run_id)
            return current.state.value == "ready" and current.fencing_token is not None

        await eventually(given_back, what="the run claimed and given back")
        current, _ = await api_server.jobs.run(run.run_id)
        assert current.state.value == "ready"
        assert current.attempt == 0, "an undelivered lease must not cost an attempt"
        first_token = current.fencing_token

        response = await client.post("/v1/lease", json={"queues": ["billing"], "max": 1})
        [lease] = response.json()["leases"]
        assert lease["runId"] == run.run_id
        assert lease["attempt"] == 1
        assert first_token is not None and lease["fencingToken"] > first_token
