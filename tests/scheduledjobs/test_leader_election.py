"""Two operator replicas on one API server: exactly one leads (the Lease
``tickwork-operator``), both answer admission, the standby takes over when the leader
stops or is cut off from the Lease, and a leader that can no longer renew stops writing
before its Lease can have expired for the others.

Each replica talks to the emulator with its own token, so the audit trail says who
wrote what. Leases of 2 s (renewed every 0.6 s, 0.2 s of skew margin): these tests are
about wall-clock deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube import emulator
from kube.reviews import User

from tickwork.coordination.leader import OPERATOR_LEASE
from tickwork.core.settings import LeaderElectionSettings, OperatorSettings, WebhookSettings
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.operator import leadership
from tickwork.operator.cluster import Cluster, NotLeading
from tickwork.operator.runtime import Operator

from .conftest import NAMESPACES, created, edited, quick, ready, scheduled_job

LEASE_SECONDS = 2.0
RENEW_SECONDS = LEASE_SECONDS * 0.3
LEASE_NAMESPACE = "tickwork"
WRITES = {"create", "update", "patch", "delete"}


@dataclass
class Replica:
    name: str
    operator: Operator
    cluster: Cluster
    stop: asyncio.Event
    running: asyncio.Task[None]

    @property
    def election(self) -> Any:
        assert self.operator.election is not None
        return self.operator.election

    @property
    def health(self) -> str:
        assert self.operator.health is not None
        return self.operator.health.url

    async def readyz(self) -> tuple[int, dict[str, Any]]:
        async with httpx.AsyncClient(timeout=5) as http:
            answer = await http.get(f"{self.health}/readyz")
        return answer.status_code, answer.json()

    async def leader_gauge(self) -> float:
        async with httpx.AsyncClient(timeout=5) as http:
            answer = await http.get(f"{self.health}/metrics")
        for line in answer.text.splitlines():
            if line.startswith("tickwork_operator_leader "):
                return float(line.split()[1])
        raise AssertionError(f"no tickwork_operator_leader in {answer.text!r}")


@pytest.fixture
async def replicas(
    cluster_kube: emulator.Emulator, jobs: Jobs, tmp_path: Path
) -> AsyncIterator[Any]:
    """``async with replica("operator-a") as a:`` runs one operator replica with leader
    election, calling the emulator as the user ``operator-a``."""
    await cluster_kube.create_namespace(LEASE_NAMESPACE)

    @contextlib.asynccontextmanager
    async def replica(name: str) -> AsyncIterator[Replica]:
        token = f"token-of-{name}"
        cluster_kube.tokens[token] = User(name)
        kubeconfig = cluster_kube.write_kubeconfig(tmp_path / f"{name}.kubeconfig", token=token)
        cluster = await Cluster.connect(str(kubeconfig))
        settings = OperatorSettings(
            namespaces=NAMESPACES,
            webhook=WebhookSettings(port=None, bind="127.0.0.1", host="127.0.0.1", insecure=True),
            election=LeaderElectionSettings(
                enabled=True,
                lease_namespace=LEASE_NAMESPACE,
                identity=name,
                lease_seconds=LEASE_SECONDS,
            ),
            status_interval=0.2,
            health_port=0,
            health_bind="127.0.0.1",
            store_retry_seconds=0.2,
        )
        election = leadership.election(cluster, settings.election)
        election.test_signals.init()
        operator = Operator(jobs, cluster, settings, tune=quick, election=election)
        operator.test_signals.init()
        stop = asyncio.Event()
        running = asyncio.create_task(operator.run(stop))
        try:
            async with asyncio.timeout(10):
                serving = asyncio.create_task(operator.admitting.wait())
                await asyncio.wait({serving, running}, return_when=asyncio.FIRST_COMPLETED)
                if running.done():
                    running.result()  # the start failed: show why
            yield Replica(name, operator, cluster, stop, running)
        finally:
            stop.set()
            async with asyncio.timeout(15):
                await running
            await cluster.close()

    return replica


def holder(kube: emulator.Emulator) -> str | None:
    lease = kube.get("leases", OPERATOR_LEASE, LEASE_NAMESPACE)
    return None if lease is None else lease["spec"].get("holderIdentity")


def expires(kube: emulator.Emulator) -> datetime.datetime:
    """When the Lease expires for every replica but its holder, as stored."""
    lease = kube.get("leases", OPERATOR_LEASE, LEASE_NAMESPACE)
    assert lease is not None
    renewed = datetime.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    return renewed + datetime.timedelta(seconds=lease["spec"]["leaseDurationSeconds"])


def writes_by(kube: emulator.Emulator, user: str, since: int = 0) -> list[str]:
    """What ``user`` wrote (answered 2xx) from audit position ``since``, Leases aside."""
    return [
        f"{r.verb} {r.target} {r.namespace}/{r.name}"
        for r in kube.audit[since:]
        if r.user == user and r.verb in WRITES and r.resource != "leases" and r.code < 300
    ]


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "b7c0a9f4-0000-4000-8000-000000000001",
            "kind": {"group": "tickwork.dev", "version": "v1alpha1", "kind": "ScheduledJob"},
            "resource": {
                "group": "tickwork.dev",
                "version": "v1alpha1",
                "resource": "scheduledjobs",
            },
            "operation": "CREATE",
            "namespace": obj["metadata"]["namespace"],
            "name": obj["metadata"]["name"],
            "object": obj,
            "userInfo": {"username": "someone"},
            "dryRun": False,
        },
    }


async def admission(replica: Replica, obj: dict[str, Any]) -> dict[str, Any]:
    """This replica's own webhook server's answer (not the API server's routing)."""
    assert replica.operator.webhook is not None
    config = replica.operator.webhook.client_config
    assert config is not None
    async with httpx.AsyncClient(timeout=5) as http:
        answer = await http.post(f"{config['url']}/validate", json=review(obj))
    answer.raise_for_status()
    response: dict[str, Any] = answer.json()["response"]
    return response


async def test_of_two_replicas_one_leads_the_other_stands_by_and_both_answer_admission(
    cluster_kube: emulator.Emulator, replicas: Any
) -> None:
    async with replicas("operator-a") as a:
        await asyncio.wait_for(a.operator.ready.wait(), 10)
        async with replicas("operator-b") as b:
            # Several tries of the standby, each refused: the Lease stays the leader's.
            for _ in range(3):
                assert await b.election.test_signals.tried.wait() is False
            assert (a.operator.leading, b.operator.leading) == (True, False)
            assert holder(cluster_kube) == "operator-a"
            assert not b.operator.ready.is_set()

            assert await a.readyz() == (
                200,
                {"status": "ready", "role": "leader", "identity": "operator-a"},
            )
            # Ready, so the webhook Service routes to it too.
            assert await b.readyz() == (
                200,
                {"status": "ready", "role": "standby", "identity": "operator-b"},
            )
            assert (await a.leader_gauge(), await b.leader_gauge()) == (1.0, 0.0)

            # Both answer admission, refusing the same object with the same words.
            invalid = scheduled_job("typo", "team-a", schedule={"cron": "61 * * * *"})
            answers = [await admission(replica, invalid) for replica in (a, b)]
            for answer in answers:
                assert answer["allowed"] is False
                assert answer["status"]["code"] == 422
                assert answer["status"]["message"].startswith("spec.schedule.cron: ")
            assert answers[0]["status"] == answers[1]["status"]

            # Only the leader writes: the standby reconciled nothing.
            await cluster_kube.create(scheduled_job("nightly", schedule={"cron": "0 3 * * *"}))
            await cluster_kube.wait_for("sj", "nightly", ready, namespace="default")
            assert writes_by(cluster_kube, "operator-b") == []
            assert writes_by(cluster_kube, "operator-a")


async def test_the_standby_takes_over_when_the_leader_stops_and_keeps_status_current(
    cluster_kube: emulator.Emulator, replicas: Any
) -> None:
    async with replicas("operator-b") as b:
        await asyncio.wait_for(b.operator.ready.wait(), 10)
        async with replicas("operator-a") as a:
            assert (b.operator.leading, a.operator.leading) == (True, False)
            await created(cluster_kube, scheduled_job("nightly", schedule={"cron": "0 3 * * *"}))
            b.stop.set()
            await asyncio.wait_for(b.running, 15)
            stopped = time.monotonic()
            # A clean stop releases the Lease: the standby's next try takes it.
            assert await a.election.test_signals.changed.wait() == "acquired"
            took = time.monotonic() - stopped
            await asyncio.wait_for(a.operator.ready.wait(), 10)
            print(f"takeover after a clean stop: {took:.2f}s")
            assert took < LEASE_SECONDS  # not waited out: released
            assert holder(cluster_kube) == "operator-a"

            since = len(cluster_kube.audit)
            await edited(cluster_kube, "nightly", {"schedule": {"cron": "30 3 * * *"}}, 2)
            assert any(
                "scheduledjobs/status default/nightly" in w
                for w in writes_by(cluster_kube, "operator-a", since)
            )
            assert writes_by(cluster_kube, "operator-b", since) == []
            assert await a.leader_gauge() == 1.0


async def test_a_leader_cut_off_from_its_lease_stops_writing_before_it_expires_for_the_standby(
    cluster_kube: emulator.Emulator, replicas: Any, jobs: Jobs
) -> None:
    async with replicas("operator-a") as a:
        await asyncio.wait_for(a.operator.ready.wait(), 10)
        async with replicas("operator-b") as b:
            await created(cluster_kube, scheduled_job("nightly", schedule={"cron": "0 3 * * *"}))
            assert await b.election.test_signals.tried.wait() is False

            # A reaches everything but its Lease: the asymmetric partition, in which only
            # the deadline keeps it from writing beside the next leader.
            cut = cluster_kube.fail(resource="leases", user="operator-a", code=503, times=None)
            lost = await a.election.test_signals.changed.wait_for(lambda c: c != "acquired")
            assert lost == "lost:expired"
            stepped_down = datetime.datetime.now(datetime.UTC)
            at_step_down = len(cluster_kube.audit)
            # Before the Lease can have expired for the standby.
            expiry = expires(cluster_kube)
            margin = (expiry - stepped_down).total_seconds()
            print(f"stepped down {margin:.2f}s before the Lease expired for the others")
            assert margin > 0
            assert not a.operator.leading
            with pytest.raises(NotLeading):
                await a.cluster.patch_status("default", "nightly", {"deadRuns": 7})

            # The standby takes it once it has expired, within TTL + one renew interval.
            assert await b.election.test_signals.changed.wait(within=10) == "acquired"
            took_over = datetime.datetime.now(datetime.UTC)
            late = (took_over - expiry).total_seconds()
            print(f"the standby took over {late:.2f}s after the Lease expired")
            assert 0 <= late < RENEW_SECONDS + 1.0
            await asyncio.wait_for(b.operator.ready.wait(), 10)
            assert holder(cluster_kube) == "operator-b"
            assert cut.hits > 0

            # A change after the failover: written by the new leader, never by the old.
            await edited(cluster_kube, "nightly", {"schedule": {"cron": "30 3 * * *"}}, 2)
            # A run leased: the run-derived status comes from the new leader's status pass.
            await jobs.enqueue("default", "nightly", EnqueueRequest(), "test")
            dispatcher = Dispatcher(jobs.database, jobs.clock)
            leased = await dispatcher.lease(
                ["default"], limit=1, worker_id="worker-1", lease_seconds=30
            )
            assert len(leased) == 1
            await cluster_kube.wait_for(
                "sj",
                "nightly",
                lambda o: bool(o and o.get("status", {}).get("activeRuns") == 1),
                namespace="default",
            )
            assert writes_by(cluster_kube, "operator-a", at_step_down) == []
            assert writes_by(cluster_kube, "operator-b", at_step_down)
            assert (await a.leader_gauge(), await b.leader_gauge()) == (0.0, 1.0)

            # Healed, the old leader stays a standby: the Lease is the other's now.
            a.election.test_signals.tried.init()
            cluster_kube.faults.remove(cut)
            assert await a.election.test_signals.tried.wait() is False
            code, body = await a.readyz()
            assert (code, body["role"]) == (200, "standby")


async def test_a_takeover_while_the_api_server_fails_the_listing_is_tried_again(
    cluster_kube: emulator.Emulator, replicas: Any
) -> None:
    async with replicas("operator-a") as a:
        await asyncio.wait_for(a.operator.ready.wait(), 10)
        async with replicas("operator-b") as b:
            assert await b.election.test_signals.tried.wait() is False
            failing = cluster_kube.fail("list", "scheduledjobs", user="operator-b", times=2)
            a.stop.set()
            await asyncio.wait_for(a.running, 15)
            assert await b.election.test_signals.changed.wait() == "acquired"
            await asyncio.wait_for(b.operator.ready.wait(), 10)
            assert failing.spent
            assert b.operator.terms == 1
            await created(cluster_kube, scheduled_job("nightly", schedule={"cron": "0 3 * * *"}))
            assert not b.running.done()
