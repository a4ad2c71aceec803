"""Kubernetes-native auth (``--auth kubernetes``) against the emulated API server:
ServiceAccount tokens checked with TokenReview, each call authorised with
SubjectAccessReview on the tickwork.dev API group (namespace = tenant), answers cached
for seconds, and nobody let in while the API server errs or hangs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from conftest import served
from kube.emulator import Emulator
from kube.reviews import User

from api.clients import HandClock, assert_problem
from tickwork.api import kubernetes_auth
from tickwork.api.review_settings import ReviewSettings
from tickwork.api.services import Services
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

WORKER = "sa-token-team-a-worker-0123456789"
SERVICE = "sa-token-team-a-service-0123456789"
OUTSIDER = "sa-token-team-b-service-0123456789"
PERSON = "oidc-token-of-a-person-0123456789"
CACHE_SECONDS = 10.0
# Generous for a busy machine (the emulator answers in milliseconds); the hang tests
# wait it out once each.
REVIEW_TIMEOUT = 2.0


@dataclass
class Cluster:
    url: str
    kube: Emulator
    clock: HandClock

    def client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {token}"})

    def reviews(self) -> list[dict[str, Any]]:
        """The SubjectAccessReviews asked so far: their resource attributes."""
        found = []
        for record in self.kube.audit:
            if record.verb == "create" and record.resource == "subjectaccessreviews":
                spec = record.body["spec"]
                found.append(spec.get("resourceAttributes") or spec["nonResourceAttributes"])
        return found


@pytest.fixture
async def cluster(kube: Emulator, database: Database) -> AsyncIterator[Cluster]:
    kube.tokens[WORKER] = User.service_account("team-a", "worker")
    kube.tokens[SERVICE] = User.service_account("team-a", "service")
    kube.tokens[OUTSIDER] = User.service_account("team-b", "service")
    kube.tokens[PERSON] = User("alice@example.com", groups=("system:authenticated",))
    # team-a's worker leases "default"; its service manages team-a's jobs.
    worker = "system:serviceaccount:team-a:worker"
    service = "system:serviceaccount:team-a:service"
    kube.access.allow(
        user=worker, verb="lease", resource="queues", namespace="team-a", name="default"
    )
    kube.access.allow(user=worker, verb="get", resource="runs", namespace="team-a")
    kube.access.allow(user=service, api_group="tickwork.dev", namespace="team-a")
    kube.access.allow(user=service, verb="get", resource="")  # /metrics
    clock = HandClock()
    api = await kubernetes_auth.api_client(kube.kubeconfig)
    authenticator = kubernetes_auth.KubernetesAuth(
        api,
        ReviewSettings(
            cache_seconds=CACHE_SECONDS, negative_cache_seconds=5, timeout_seconds=REVIEW_TIMEOUT
        ),
        clock=clock,
    )
    services = Services(
        engine=Installation.over(database), authenticator=authenticator, metrics=Metrics()
    )
    try:
        async with served(services) as url:
            yield Cluster(url, kube, clock)
    finally:
        await api.close()


async def test_a_service_account_acts_in_its_namespace_as_rbac_allows(cluster: Cluster) -> None:
    async with cluster.client(SERVICE) as service, cluster.client(WORKER) as worker:
        assert (await service.put("/v1/jobs/payroll", json={})).status_code == 201
        job = (await service.get("/v1/jobs/payroll")).json()
        assert job["tenant"] == "team-a"  # namespace = tenant
        run = (await service.post("/v1/jobs/payroll/runs")).json()
        [lease] = (await worker.post("/v1/lease", json={"queues": ["default"]})).json()["leases"]
        assert lease["runId"] == run["runId"]
        beat = await worker.post(
            f"/v1/runs/{lease['runId']}/heartbeat", json={"fencingToken": lease["fencingToken"]}
        )
        assert beat.status_code == 200, beat.text
        done = await worker.post(
            f"/v1/runs/{lease['runId']}/complete",
            json={"fencingToken": lease["fencingToken"], "outcome": "succeeded"},
        )
        assert done.json()["state"] == "succeeded"
        assert (await worker.get(f"/v1/runs/{run['runId']}")).status_code == 200
    # Heartbeat and complete ask RBAC nothing: the fencing token and the tenant decide.
    assert {"verb": "lease", "resource": "queues"}.items() <= cluster.reviews()[-2].items()


async def test_the_review_attributes_are_the_contracts(cluster: Cluster) -> None:
    """Each call asks exactly the verb, resource, resourceName and namespace of the
    documented table, in the tickwork.dev API group."""
    async with cluster.client(SERVICE) as service:
        assert (await service.put("/v1/jobs/payroll", json={})).status_code == 201
        run = (await service.post("/v1/jobs/payroll/runs")).json()
        calls = [
            ("GET", "/v1/jobs/payroll", ("get", "scheduledjobs", "payroll")),
            ("GET", "/v1/jobs", ("list", "scheduledjobs", None)),
            ("POST", "/v1/jobs/payroll:pause", ("update", "scheduledjobs", "payroll")),
            ("POST", "/v1/jobs/payroll:resume", ("update", "scheduledjobs", "payroll")),
            ("POST", "/v1/jobs/payroll/runs", ("create", "runs", "payroll")),
            ("GET", "/v1/jobs/payroll/runs", ("list", "runs", None)),
            ("GET", f"/v1/runs/{run['runId']}", ("get", "runs", "payroll")),
            ("POST", f"/v1/runs/{run['runId']}:cancel", ("update", "runs", "payroll")),
            ("GET", "/v1/dlq", ("list", "dlq", None)),
            ("GET", "/v1/audit", ("list", "audit", None)),
            ("DELETE", "/v1/jobs/payroll", ("delete", "scheduledjobs", "payroll")),
        ]
        for method, path, (verb, resource, name) in calls:
            cluster.clock.advance(CACHE_SECONDS + 1)  # past the cached answers
            before = len(cluster.reviews())
            answer = await service.request(method, path)
            assert answer.status_code < 300, (path, answer.text)
            asked = cluster.reviews()[before:]
            expected = {"group": "tickwork.dev", "verb": verb, "resource": resource}
            expected |= {"namespace": "team-a"} | ({"name": name} if name else {})
            assert asked == [expected], path
        before = len(cluster.reviews())
        assert (await service.get("/metrics")).status_code == 200
        assert cluster.reviews()[before:] == [{"path": "/metrics", "verb": "get"}]


async def test_leasing_a_queue_rbac_does_not_grant_is_forbidden(cluster: Cluster) -> None:
    async with cluster.client(WORKER) as worker:
        refused = await worker.post("/v1/lease", json={"queues": ["default", "billing"]})
        problem = assert_problem(refused, 403, "forbidden")
        assert "lease queues 'billing'" in problem["detail"] and problem["field"] == "queues"
        # The worker's other rights stop at its verbs: it may not enqueue.
        assert_problem(await worker.post("/v1/jobs/payroll/runs"), 403, "forbidden")


async def test_answers_are_cached_and_expire(cluster: Cluster) -> None:
    kube = cluster.kube
    async with cluster.client(WORKER) as worker:
        for _ in range(20):
            answer = await worker.post("/v1/lease", json={"queues": ["default"]})
            assert answer.status_code == 200
        assert kube.count("create", "tokenreviews") == 1
        assert kube.count("create", "subjectaccessreviews") == 1
        cluster.clock.advance(CACHE_SECONDS + 0.1)
        assert (await worker.post("/v1/lease", json={"queues": ["default"]})).status_code == 200
        assert kube.count("create", "tokenreviews") == 2
        assert kube.count("create", "subjectaccessreviews") == 2


async def test_concurrent_callers_share_one_review(cluster: Cluster) -> None:
    async with cluster.client(WORKER) as worker:
        answers = await asyncio.gather(
            *(worker.post("/v1/lease", json={"queues": ["default"]}) for _ in range(10))
        )
    assert {a.status_code for a in answers} == {200}
    assert cluster.kube.count("create", "tokenreviews") == 1
    assert cluster.kube.count("create", "subjectaccessreviews") == 1


async def test_refusals_are_cached_briefly(cluster: Cluster) -> None:
    kube = cluster.kube
    async with cluster.client("not-a-token-anyone-issued") as stranger:
        for _ in range(3):
            assert_problem(await stranger.get("/v1/jobs"), 401, "unauthenticated")
        assert kube.count("create", "tokenreviews") == 1
    async with cluster.client(WORKER) as worker:
        assert_problem(await worker.post("/v1/lease", json={"queues": ["bulk"]}), 403, "forbidden")
        # A RoleBinding applied now counts once the refusal's shorter cache runs out.
        kube.access.allow(user="system:serviceaccount:team-a:worker", verb="lease", name="bulk")
        assert_problem(await worker.post("/v1/lease", json={"queues": ["bulk"]}), 403, "forbidden")
        cluster.clock.advance(5.1)
        assert (await worker.post("/v1/lease", json={"queues": ["bulk"]})).status_code == 200


async def test_another_namespace_needs_rbac_there(cluster: Cluster) -> None:
    async with cluster.client(SERVICE) as service, cluster.client(OUTSIDER) as outsider:
        assert (await service.put("/v1/jobs/payroll", json={})).status_code == 201
        run = (await service.post("/v1/jobs/payroll/runs")).json()
        # team-b's account has no rights in team-a: refused, and team-a's run is absent.
        assert_problem(await outsider.get("/v1/jobs?tenant=team-a"), 403, "forbidden")
        assert_problem(await outsider.get(f"/v1/runs/{run['runId']}"), 404, "not-found")
        # Granted in team-a's namespace, it may act there.
        cluster.kube.access.allow(
            user="system:serviceaccount:team-b:service", verb="list", namespace="team-a"
        )
        cluster.clock.advance(5.1)
        listed = await outsider.get("/v1/jobs?tenant=team-a")
        assert [job["name"] for job in listed.json()["items"]] == ["payroll"]


async def test_only_service_accounts_have_a_tenant(cluster: Cluster) -> None:
    async with cluster.client(PERSON) as person:
        problem = assert_problem(await person.get("/v1/jobs"), 401, "unauthenticated")
    assert "not a ServiceAccount" in problem["detail"]


@pytest.mark.parametrize("review", ["tokenreviews", "subjectaccessreviews"])
async def test_an_erring_api_server_lets_nobody_in(cluster: Cluster, review: str) -> None:
    kube = cluster.kube
    fault = kube.fail("create", review, code=500, times=None)
    async with cluster.client(WORKER) as worker:
        for _ in range(2):
            refused = await worker.post("/v1/lease", json={"queues": ["default"]})
            problem = assert_problem(refused, 503, "auth-unavailable")
            assert refused.headers["retry-after"] == "1"
            assert "answered a" in problem["detail"] and "500" in problem["detail"]
        assert fault.hits == 2  # a failure is never cached
        kube.faults.remove(fault)
        assert (await worker.post("/v1/lease", json={"queues": ["default"]})).status_code == 200


@pytest.mark.parametrize("review", ["tokenreviews", "subjectaccessreviews"])
async def test_a_hanging_api_server_lets_nobody_in_within_the_timeout(
    cluster: Cluster, review: str
) -> None:
    cluster.kube.hang("create", review, times=None, seconds=20)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with cluster.client(WORKER) as worker:
        refused = await worker.post("/v1/lease", json={"queues": ["default"]})
    problem = assert_problem(refused, 503, "auth-unavailable")
    assert "did not answer" in problem["detail"]
    assert loop.time() - started < REVIEW_TIMEOUT + 3  # the review timeout, not the hang


async def test_the_dashboard_asks_rbac_too(cluster: Cluster) -> None:
    """A token that may only lease cannot read its namespace through the dashboard."""
    async with httpx.AsyncClient(base_url=cluster.url) as browser:
        form = await browser.get("/ui/login")
        csrf = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        signed = await browser.post("/ui/login", data={"token": WORKER, "csrf": csrf})
        assert signed.status_code == 303
        page = await browser.get("/ui/jobs")
        assert page.status_code == 403
        assert "may not list scheduledjobs" in page.text
