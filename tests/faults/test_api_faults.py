"""The API through database outages: ``/readyz`` answers (never hangs) and says which shards
are down (200 ``degraded`` while another shard serves, 503 when none does), calls answer
``503 store-unavailable`` with ``Retry-After`` (never 500), and everything works again
once the database is back."""

from __future__ import annotations

import httpx
from conftest import TEAM_TOKEN
from polling import eventually

from faults.conftest import SHARDS, Api, proxied_map, serving
from faults.postgres import PostgresProcess
from faults.proxy import TcpProxy
from tickwork.core.shards import ShardMap

TEAM = {"Authorization": f"Bearer {TEAM_TOKEN}"}
STORE_UNAVAILABLE = "https://tickwork.dev/problems/store-unavailable"


def client(api: Api) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=api.url, headers=TEAM, timeout=10)


def job_on(api: Api, shard: int) -> str:
    return next(
        f"job-{n}" for n in range(100) if api.services.jobs.shard_of("acme", f"job-{n}") == shard
    )


async def ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).json()["status"] == "ready"


def assert_store_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == STORE_UNAVAILABLE
    assert int(response.headers["retry-after"]) >= 1


async def test_503_while_postgres_starts_up(fault_url: str, proxies: list[TcpProxy]) -> None:
    async with serving(proxied_map(fault_url, proxies)) as api, client(api) as http:
        assert (await http.put("/v1/jobs/report", json={})).status_code == 201
        for proxy in proxies:  # restarted: open links gone, new ones told "starting up"
            proxy.reset()
            proxy.starting_up()
        readiness = await http.get("/readyz")
        assert readiness.status_code == 503, readiness.text
        assert readiness.json()["down"] == list(range(SHARDS))
        assert readiness.json()["problems"][0] == "shard 0: unreachable (starting up)"
        assert_store_unavailable(await http.get("/v1/jobs/report"))
        assert_store_unavailable(await http.put("/v1/jobs/other", json={}))
        for proxy in proxies:
            proxy.heal()
        await eventually(lambda: ready(http), within=5, what="ready again")
        assert (await http.get("/v1/jobs/report")).status_code == 200


async def test_readyz_answers_and_names_the_shard_while_a_link_hangs(
    fault_url: str, proxies: list[TcpProxy]
) -> None:
    async with serving(proxied_map(fault_url, proxies)) as api, client(api) as http:
        await eventually(lambda: ready(http), what="ready")
        name = job_on(api, 2)
        assert (await http.put(f"/v1/jobs/{name}", json={})).status_code == 201
        proxies[2].hang()
        # Each probe answers, within the client's timeout: checks left hanging by the
        # ones before do not hold the next up (how soon it answers: make bench).
        for _ in range(3):
            readiness = await http.get("/readyz")
            # The other shards serve: the process stays in its Service.
            assert readiness.status_code == 200
            assert readiness.json()["status"] == "degraded"
            assert readiness.json()["down"] == [2]
            [problem] = readiness.json()["problems"]
            assert problem.startswith("shard 2: unreachable"), problem
        # The pool's bounds give up on the hung link: a 503, not a hang.
        assert_store_unavailable(await http.get(f"/v1/jobs/{name}"))
        other = job_on(api, 0)
        assert (await http.put(f"/v1/jobs/{other}", json={})).status_code == 201
        proxies[2].heal()
        await eventually(lambda: ready(http), within=5, what="ready again")
        assert (await http.get(f"/v1/jobs/{name}")).status_code == 200


async def test_calls_answer_503_through_an_immediate_restart(
    postgres: PostgresProcess, fault_url: str
) -> None:
    async with serving(ShardMap.from_dsns([fault_url], SHARDS)) as api, client(api) as http:
        assert (await http.put("/v1/jobs/report", json={})).status_code == 201
        postgres.stop("immediate")
        assert (await http.get("/readyz")).status_code == 503
        for _ in range(2):  # the pooled connections died; then nothing to connect to
            assert_store_unavailable(await http.get("/v1/jobs/report"))
        postgres.start()
        await eventually(lambda: ready(http), within=5, what="ready again")
        assert (await http.get("/v1/jobs/report")).status_code == 200
