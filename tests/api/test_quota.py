"""429 quota-exceeded: a tenant over its enqueue rate, with Retry-After."""

from __future__ import annotations

import httpx
from conftest import ApiServer

from api.clients import HandClock
from tickwork.engine.quotas import EnqueueQuota

PROBLEM = "https://tickwork.dev/problems/quota-exceeded"


async def test_enqueues_over_the_tenant_rate_get_429_until_it_refills(
    api_server: ApiServer,
) -> None:
    clock = HandClock(0.0)
    api_server.services.quota = EnqueueQuota(rate=0.5, burst=2, clock=clock)
    team = httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(api_server.team_token)
    )
    other = httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(api_server.other_team_token)
    )
    async with team, other:
        for client in (team, other):
            assert (await client.put("/v1/jobs/sync", json={})).status_code == 201
        assert (await team.post("/v1/jobs/sync/runs", json={})).status_code == 201
        assert (await team.post("/v1/jobs/sync/runs", json={})).status_code == 201
        refused = await team.post("/v1/jobs/sync/runs", json={})
        assert refused.status_code == 429
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["retry-after"] == "2"
        assert refused.json()["type"] == PROBLEM
        batch = await team.post("/v1/jobs/sync/runs:batch", json={"runs": [{}, {}]})
        assert batch.status_code == 429
        # Another tenant has a bucket of its own.
        assert (await other.post("/v1/jobs/sync/runs", json={})).status_code == 201
        clock.now += 2  # one run's worth refilled
        assert (await team.post("/v1/jobs/sync/runs", json={})).status_code == 201
        listed = (await team.get("/v1/jobs/sync/runs")).json()["items"]
        assert len(listed) == 3  # refused enqueues left nothing behind
