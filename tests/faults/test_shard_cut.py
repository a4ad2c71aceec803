"""One shard's link cut, the others healthy: the dispatcher stays ready and serves every
call a team or a worker makes on the healthy shard, and answers ``503
store-unavailable`` with ``Retry-After`` for the cut shard's items only.

Two shards on two databases of their own (one URL per shard, as in production), shard
1's link held open and silent (a partition). The tenant's enqueue bucket lives on shard
1 (a hash of ``acme``), so an enqueue to a job of shard 0 also tests that a quota that
cannot be read degrades instead of failing the enqueue.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from conftest import TEAM_TOKEN, WORKER_TOKEN

from faults.conftest import serving
from faults.proxy import TcpProxy
from tickwork.core import hashing
from tickwork.core.settings import ApiSettings
from tickwork.core.shards import ShardMap
from tickwork.store.database import PoolSettings

STORE_UNAVAILABLE = "https://tickwork.dev/problems/store-unavailable"
# A statement, a wait for a connection and a new connection each give up within this:
# short, yet long enough for a healthy shard's statement on a loaded 2-core machine.
QUICK_POOLS = PoolSettings(command_timeout=1.0, acquire_timeout=1.0, connect_timeout=1.0)
CUT = 1
SPEC = {"retry": {"maxAttempts": 1}}


def job_on(shard: int) -> str:
    return next(f"job-{n}" for n in range(100) if hashing.shard_of("acme", f"job-{n}", 2) == shard)


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, (response.request.url, response.text)
    assert response.json()["type"] == STORE_UNAVAILABLE
    assert int(response.headers["retry-after"]) >= 1


def assert_item_unavailable(item: dict[str, Any]) -> None:
    assert item["problem"]["type"] == STORE_UNAVAILABLE, item
    assert item["problem"]["status"] == 503


async def test_with_one_shard_cut_every_team_and_worker_call_on_the_other_shard_works(
    separate_urls: list[str], proxies: list[TcpProxy]
) -> None:
    assert hashing.shard_of("acme", "", 2) == CUT  # acme's enqueue bucket is on the cut shard
    shard_map = ShardMap.from_dsns([proxies[n].dsn(url) for n, url in enumerate(separate_urls)])
    settings = ApiSettings(readiness_timeout_seconds=0.3)
    async with (
        serving(shard_map, QUICK_POOLS, settings) as api,
        httpx.AsyncClient(
            base_url=api.url, headers={"Authorization": f"Bearer {TEAM_TOKEN}"}, timeout=10
        ) as team,
        httpx.AsyncClient(
            base_url=api.url, headers={"Authorization": f"Bearer {WORKER_TOKEN}"}, timeout=10
        ) as worker,
        httpx.AsyncClient(base_url=api.url, timeout=10) as anyone,
    ):
        api.services.dispatcher.claim_seconds = 1.0  # a claim on the cut shard gives up
        jobs = {shard: job_on(shard) for shard in (0, 1)}
        runs: dict[tuple[int, str], str] = {}
        for shard, job in jobs.items():
            assert (await team.put(f"/v1/jobs/{job}", json=SPEC)).status_code == 201
            for use in ("replay", "discard", "single", "batch"):
                answer = await team.post(f"/v1/jobs/{job}/runs", json={})
                assert answer.status_code == 201, answer.text
                runs[shard, use] = answer.json()["runId"]
            later = await team.post(f"/v1/jobs/{job}/runs", json={"delaySeconds": 3600})
            runs[shard, "cancel"] = later.json()["runId"]
        leased = await worker.post("/v1/lease", json={"queues": ["default"], "max": 100})
        tokens = {item["runId"]: item["fencingToken"] for item in leased.json()["leases"]}
        assert len(tokens) == 8
        dead = [
            {"runId": runs[s, use], "fencingToken": tokens[runs[s, use]], "outcome": "failed"}
            | {"error": {"message": "boom", "retryable": False}}
            for s in (0, 1)
            for use in ("replay", "discard")
        ]
        answer = await worker.post("/v1/runs:complete", json={"items": dead})
        assert [item["state"] for item in answer.json()["items"]] == ["dead"] * 4

        proxies[CUT].hang()

        # Ready all along, naming the shard that is down.
        for _ in range(3):
            readiness = await anyone.get("/readyz")
            assert readiness.status_code == 200, readiness.text
            body = readiness.json()
            assert body["status"] == "degraded" and body["down"] == [CUT]
            assert body["shards"] == 2 and body["problems"][0].startswith("shard 1: unreachable")

        def token(shard: int, use: str) -> dict[str, Any]:
            return {"fencingToken": tokens[runs[shard, use]]}

        def beat(shard: int, use: str) -> dict[str, Any]:
            return {"runId": runs[shard, use]} | token(shard, use)

        healthy, cut = jobs[0], jobs[CUT]
        # The cut shard's calls, all at once (each gives up within the pools' bounds).
        on_cut = await asyncio.gather(
            team.put(f"/v1/jobs/{cut}", json=SPEC),
            team.get(f"/v1/jobs/{cut}"),
            team.post(f"/v1/jobs/{cut}:pause"),
            team.post(f"/v1/jobs/{cut}:resume"),
            team.post(f"/v1/jobs/{cut}/runs", json={}),
            team.post(f"/v1/jobs/{cut}/runs", json={}, headers={"Idempotency-Key": "k-cut"}),
            team.post(f"/v1/jobs/{cut}/runs:batch", json={"runs": [{}, {}]}),
            team.get(f"/v1/jobs/{cut}/runs"),
            team.get(f"/v1/runs/{runs[CUT, 'cancel']}"),
            team.post(f"/v1/runs/{runs[CUT, 'cancel']}:cancel"),
            team.get("/v1/dlq", params={"job": cut}),
            team.post(f"/v1/dlq/{runs[CUT, 'replay']}:replay"),
            team.post(f"/v1/dlq/{runs[CUT, 'discard']}:discard"),
            team.get("/v1/audit", params={"job": cut}),
            worker.get(f"/v1/runs/{runs[CUT, 'single']}"),
            worker.post(f"/v1/runs/{runs[CUT, 'single']}/heartbeat", json=token(CUT, "single")),
            worker.post(
                f"/v1/runs/{runs[CUT, 'single']}/complete",
                json=token(CUT, "single") | {"outcome": "succeeded"},
            ),
            # The lists merge every shard: without one of them there is no right page.
            team.get("/v1/jobs"),
            team.get("/v1/dlq"),
            team.get("/v1/audit"),
            team.delete(f"/v1/jobs/{cut}"),
        )
        for response in on_cut:
            assert_unavailable(response)

        # The healthy shard's, one after the other, as a team and its workers would.
        answer = await team.put(f"/v1/jobs/{healthy}", json=SPEC)
        assert answer.status_code == 200, answer.text
        assert (await team.get(f"/v1/jobs/{healthy}")).json()["name"] == healthy
        assert (await team.post(f"/v1/jobs/{healthy}:pause")).json()["paused"] is True
        assert (await team.post(f"/v1/jobs/{healthy}:resume")).json()["paused"] is False
        enqueued = []
        for headers in ({}, {"Idempotency-Key": "k-healthy"}):
            answer = await team.post(f"/v1/jobs/{healthy}/runs", json={}, headers=headers)
            assert answer.status_code == 201, answer.text
            enqueued.append(answer.json()["runId"])
        # With a query string: FastAPI's route, not the fast path.
        answer = await team.post(f"/v1/jobs/{healthy}/runs?tenant=acme", json={})
        assert answer.status_code == 201, answer.text
        enqueued.append(answer.json()["runId"])
        answer = await team.post(f"/v1/jobs/{healthy}/runs:batch", json={"runs": [{}, {}]})
        assert answer.status_code == 200, answer.text
        enqueued += [item["runId"] for item in answer.json()["items"]]
        listed = await team.get(f"/v1/jobs/{healthy}/runs", params={"limit": 500})
        assert listed.status_code == 200 and len(listed.json()["items"]) == 5 + len(enqueued)
        assert (await team.get(f"/v1/runs/{runs[0, 'cancel']}")).json()["state"] == "scheduled"
        cancelled = await team.post(f"/v1/runs/{runs[0, 'cancel']}:cancel")
        assert cancelled.json()["state"] == "cancelled", cancelled.text
        letters = await team.get("/v1/dlq", params={"job": healthy})
        assert {item["runId"] for item in letters.json()["items"]} == {
            runs[0, "replay"],
            runs[0, "discard"],
        }
        replayed = await team.post(f"/v1/dlq/{runs[0, 'replay']}:replay")
        assert replayed.json()["state"] == "ready", replayed.text
        discarded = await team.post(f"/v1/dlq/{runs[0, 'discard']}:discard")
        assert discarded.json()["state"] == "discarded", discarded.text
        audit = await team.get("/v1/audit", params={"job": healthy})
        assert audit.status_code == 200 and audit.json()["items"], audit.text

        # Leases from the healthy shard go on: the runs enqueued since the cut, and the
        # replayed one.
        seen: set[str] = set()
        for _ in range(3):
            answer = await worker.post("/v1/lease", json={"queues": ["default"], "max": 100})
            assert answer.status_code == 200, answer.text
            seen |= {item["runId"] for item in answer.json()["leases"]}
            if seen >= {*enqueued, runs[0, "replay"]}:
                break
        assert seen == {*enqueued, runs[0, "replay"]}
        assert (await worker.get(f"/v1/runs/{runs[0, 'single']}")).json()["state"] == "leased"
        single = runs[0, "single"]
        answer = await worker.post(f"/v1/runs/{single}/heartbeat", json=token(0, "single"))
        assert answer.status_code == 200 and "leaseExpiresAt" in answer.json(), answer.text
        answer = await worker.post(
            f"/v1/runs/{single}/complete", json=token(0, "single") | {"outcome": "succeeded"}
        )
        assert answer.json()["state"] == "succeeded", answer.text
        both = [beat(0, "batch"), beat(CUT, "batch")]
        answer = await worker.post("/v1/runs:heartbeat", json={"items": both})
        assert answer.status_code == 200, answer.text
        ours, theirs = answer.json()["items"]
        assert "leaseExpiresAt" in ours
        assert_item_unavailable(theirs)
        done = [item | {"outcome": "succeeded"} for item in both]
        answer = await worker.post("/v1/runs:complete", json={"items": done})
        assert answer.status_code == 200, answer.text
        ours, theirs = answer.json()["items"]
        assert ours["state"] == "succeeded"
        assert_item_unavailable(theirs)
        deleted = await team.delete(f"/v1/jobs/{healthy}")
        assert deleted.status_code == 200, deleted.text

        assert (await anyone.get("/readyz")).status_code == 200
        proxies[CUT].heal()
