"""The chart's RBAC is exactly what the roles use: each role runs against the emulated
API server as its ServiceAccount, and the calls it made (the emulator's audit) must be
granted by the chart, with nothing granted that no call needed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube.emulator import Emulator
from kube.reviews import User
from polling import eventually

from chart import rbac
from chart.chart import NAMESPACE, name, rendered
from tickwork.api.app import create_app
from tickwork.api.review_settings import ReviewSettings
from tickwork.api.server import HttpServer
from tickwork.cli import runtime
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

DISPATCHER_TOKEN = "sa-token-of-the-dispatcher-0123456789"
WORKER_TOKEN = "sa-token-of-a-team-worker-0123456789"


def check_granted_what_it_called(kube: Emulator, component: str) -> None:
    """What ``component`` called as its ServiceAccount is what the chart grants it, with
    the minimal values and with everything on."""
    account = User.service_account(NAMESPACE, name(component))
    needed = rbac.used(kube.audit, account.username)
    assert needed, f"the {component} made no call as its ServiceAccount"
    for values in ("minimal", "everything"):
        rbac.check_exact(needed, rbac.granted(rendered(values), name(component)), values)


async def test_the_dispatcher_is_granted_what_kubernetes_auth_calls(
    kube: Emulator, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = User.service_account(NAMESPACE, name("dispatcher"))
    kube.tokens[DISPATCHER_TOKEN] = account
    kube.tokens[WORKER_TOKEN] = User.service_account("team-a", "worker")
    worker = "system:serviceaccount:team-a:worker"
    kube.access.allow(user=worker, api_group="tickwork.dev", namespace="team-a")
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", token=DISPATCHER_TOKEN)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))

    # The dispatcher's own wiring (tickwork dispatcher --auth kubernetes), every kind
    # of authorised call once.
    async with runtime.authenticator("kubernetes", None, ReviewSettings()) as auth:
        services = runtime.api_services(Installation.over(database), auth, Metrics())
        server = HttpServer(create_app(services), port=0)
        url = await server.start()
        try:
            headers = {"Authorization": f"Bearer {WORKER_TOKEN}"}
            async with httpx.AsyncClient(base_url=url, headers=headers) as team:
                assert (await team.put("/v1/jobs/nightly", json={})).status_code == 201
                assert (await team.post("/v1/jobs/nightly/runs")).status_code == 201
                assert (await team.get("/v1/jobs")).status_code == 200
                assert (await team.get("/v1/dlq")).status_code == 200
                lease = await team.post("/v1/lease", json={"queues": ["default"]})
                assert lease.status_code == 200, lease.text
        finally:
            await server.stop()

    check_granted_what_it_called(kube, "dispatcher")
    # With the tokens file only, the dispatcher calls nothing and is granted nothing.
    assert not rbac.granted(rendered("namespaced"), name("dispatcher"))


OPERATOR_TOKEN = "sa-token-of-the-operator-0123456789"


async def test_the_operator_is_granted_what_it_calls(
    kube: Emulator, database: Database, tmp_path: Path
) -> None:
    """The operator as the chart runs it (namespaced here; the webhook served, its
    configuration kept by the chart but for the caBundle of the certificate the hook
    drew; elected through its Lease in the release namespace): start and resync,
    create, update, status passes, an invalid object, delete, the Lease released and
    taken again."""
    import asyncio
    import base64

    import kopf

    from tickwork.core.settings import (
        LeaderElectionSettings,
        OperatorSettings,
        WebhookSettings,
    )
    from tickwork.engine.jobs import Jobs
    from tickwork.operator import crd, leadership, lifecycle
    from tickwork.operator.cluster import Cluster
    from tickwork.operator.runtime import Operator

    await kube.create(crd.definition())
    [configuration] = rendered("minimal").kinds("ValidatingWebhookConfiguration")
    await kube.create(configuration)
    files = lifecycle.certificate(name("webhook"), NAMESPACE)
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    for namespace in ("team-a", "team-b", NAMESPACE):
        await kube.create_namespace(namespace)
    account = User.service_account(NAMESPACE, name("operator"))
    kube.tokens[OPERATOR_TOKEN] = account
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", token=OPERATOR_TOKEN)

    def quick(settings: kopf.OperatorSettings) -> None:
        settings.networking.request_timeout = 5
        settings.watching.connect_timeout = 2
        settings.watching.server_timeout = 30

    settings = OperatorSettings(
        namespaces=("team-a", "team-b"),
        webhook=WebhookSettings(
            port=None,
            bind="127.0.0.1",
            insecure=True,
            manage=False,
            cert_file=tmp_path / "tls.crt",
            key_file=tmp_path / "tls.key",
            ca_file=tmp_path / "ca.crt",
            configuration=configuration["metadata"]["name"],
        ),
        status_interval=0.2,
        health_port=0,
        health_bind="127.0.0.1",
        election=LeaderElectionSettings(
            enabled=True, lease_namespace=NAMESPACE, identity="operator-0", lease_seconds=5
        ),
    )
    job = {
        "apiVersion": "tickwork.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "nightly", "namespace": "team-a"},
        "spec": {"schedule": {"cron": "0 3 * * *"}},
    }

    def ready(obj: dict | None) -> bool:  # type: ignore[type-arg]
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    @contextlib.asynccontextmanager
    async def operating() -> AsyncIterator[None]:
        cluster = await Cluster.connect(str(kubeconfig))
        election = leadership.election(cluster, settings.election)
        operator = Operator(Jobs(database), cluster, settings, tune=quick, election=election)
        stop = asyncio.Event()
        running = asyncio.create_task(operator.run(stop))
        try:
            async with asyncio.timeout(10):
                await operator.ready.wait()
            yield
        finally:
            stop.set()
            async with asyncio.timeout(15):
                await running
            await cluster.close()

    async with operating():
        await kube.create(job, admit=False)
        await kube.wait_for("sj", "nightly", ready, namespace="team-a", timeout=10)
        await kube.patch("sj", "nightly", {"spec": {"paused": True}}, namespace="team-a")
        await kube.wait_for(
            "sj",
            "nightly",
            lambda o: bool(o and (o.get("status") or {}).get("observedGeneration") == 2),
            namespace="team-a",
            timeout=10,
        )
        bad = {**job, "metadata": {"name": "broken", "namespace": "team-b"}}
        bad["spec"] = {"schedule": {"cron": "61 * * * *"}}
        await kube.create(bad, admit=False)
        await kube.wait_until(
            lambda: any(e["reason"] == "InvalidSpec" for e in kube.objects("events", "team-b")),
            timeout=10,
        )
        await kube.delete("sj", "broken", namespace="team-b")
        await kube.wait_for("sj", "broken", lambda o: o is None, namespace="team-b", timeout=10)
    # Deleted while no operator ran (its finalizer stripped by hand): the next one's
    # resync asks for the object before removing the definition.
    await kube.patch("sj", "nightly", {"metadata": {"finalizers": None}}, namespace="team-a")
    await kube.delete("sj", "nightly", namespace="team-a")
    async with operating():
        # A read changes nothing stored, so nothing wakes a waiter: look every 20 ms.
        await eventually(
            lambda: kube.count("get", "scheduledjobs", namespace="team-a", name="nightly") > 0,
            what="the object read",
        )

    stored = kube.get("validatingwebhookconfigurations", configuration["metadata"]["name"])
    [webhook] = stored["webhooks"]
    assert (
        webhook["clientConfig"]["caBundle"] == base64.b64encode(files["ca.crt"].encode()).decode()
    )

    needed = rbac.used(kube.audit, account.username)
    assert needed, "the operator made no call as its ServiceAccount"
    # The caBundle: get and patch of the release's configuration, nothing else of it.
    admission = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")
    assert {p for p in needed if p[:2] == admission} == {
        (*admission, verb, "", configuration["metadata"]["name"]) for verb in ("get", "patch")
    }
    # cert-manager's CA injector writes it instead: the operator needs no rights on it.
    without_ca = {p for p in needed if p[:2] != admission}
    namespaced = rbac.granted(rendered("namespaced"), name("operator"))
    rbac.check_exact(without_ca, namespaced, "namespaced")
    # The Lease: in the release namespace only, whatever the operator watches.
    lease = ("coordination.k8s.io", "leases")
    assert {p[:4] for p in needed if p[:2] == lease} == {
        (*lease, verb, NAMESPACE) for verb in ("get", "create", "update")
    }
    # Watching every namespace: the same rules, cluster-wide.
    clusterwide = rbac.granted(rendered("minimal"), name("operator"))
    rbac.check_exact(needed, clusterwide, "every namespace")
    assert {p[:3] for p in clusterwide if p[:2] != admission} == {p[:3] for p in namespaced}
    assert {p[3] for p in clusterwide if p[:2] != lease} == {""}


SCHEDULER_TOKEN = "sa-token-of-a-scheduler-0123456789"


async def test_the_scheduler_is_granted_what_coordination_calls(
    kube: Emulator, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas as the chart runs them (--coordination kubernetes, Leases in the
    release namespace): the first takes every shard, the second joins and takes its
    share, a lease is renewed against a stale resourceVersion, both shut down."""
    from tickwork.coordination import choice
    from tickwork.coordination.coordinator import Timing

    await kube.create_namespace(NAMESPACE)
    account = User.service_account(NAMESPACE, name("scheduler"))
    kube.tokens[SCHEDULER_TOKEN] = account
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", token=SCHEDULER_TOKEN)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    timing = Timing(lease_seconds=5)

    def replica(identity: str) -> contextlib.AbstractAsyncContextManager[Any]:
        return choice.coordinator(
            database, kind="kubernetes", identity=identity, namespace=NAMESPACE, timing=timing
        )

    async with replica("scheduler-a") as first:
        await first.cycle()
        assert len(first.owned()) == database.shard_count
        async with replica("scheduler-b") as second:
            for _ in range(4):
                await second.cycle()
                await first.cycle()
                await first.shed_settled()
            assert second.owned()
            # Someone else's write in between: the next renewal meets a 409 and reads.
            kube.fail("update", "leases", code=409, times=1)
            await first.cycle()
            await second.cycle()
            await second.shutdown()
        await first.shutdown()

    check_granted_what_it_called(kube, "scheduler")
    # --coordination postgres: the scheduler calls nothing and is granted nothing.
    assert not rbac.granted(rendered("namespaced"), name("scheduler"))


JOB_RUNNER_TOKEN = "sa-token-of-a-job-runner-0123456789"


async def test_the_job_runner_is_granted_what_it_calls(
    kube: Emulator, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job-runner as the chart runs it in team-a, against a dispatcher with Kubernetes
    auth whose SubjectAccessReviews the chart's Role answers: a Job that fails, one
    deleted by someone, a cancelled run, a run of a job without its ScheduledJob. What it
    asked the API server, and what the dispatcher asked about it, is exactly what the
    Role grants."""
    import asyncio

    from kube.jobs import JobController

    from tickwork.core.spec import JobSpec, parse
    from tickwork.engine.jobs import EnqueueRequest, Jobs
    from tickwork.jobrunner.kube import Kube
    from tickwork.jobrunner.runner import JobRunner
    from tickwork.jobrunner.settings import JobRunnerSettings
    from tickwork.operator import crd
    from tickwork.worker.client import WorkerClient

    team = "team-a"
    document = rendered("everything")
    account = f"{name('job-runner')}-{NAMESPACE}"
    assert any(
        d["kind"] == "Deployment" and d["metadata"]["namespace"] == team
        for d in document.documents
        if d["metadata"]["name"] == account
    )
    given = rbac.granted(document, account, team)
    runner_user = User.service_account(team, account)
    await kube.create(crd.definition())
    await kube.create_namespace(team)
    kube.tokens[DISPATCHER_TOKEN] = User.service_account(NAMESPACE, name("dispatcher"))
    kube.tokens[JOB_RUNNER_TOKEN] = runner_user

    def decide(spec: dict[str, Any]) -> tuple[bool, str]:
        attributes = spec.get("resourceAttributes") or {}
        asked = (
            attributes.get("group", ""),
            attributes.get("resource", ""),
            attributes.get("verb", ""),
            attributes.get("namespace", ""),
            attributes.get("name") or "",
        )
        allowed = spec.get("user") == runner_user.username and not rbac.covered({asked}, given)
        return allowed, "the chart's Role" if allowed else ""

    kube.access.decide = decide
    monkeypatch.setenv(
        "KUBECONFIG", str(kube.write_kubeconfig(tmp_path / "dispatcher", token=DISPATCHER_TOKEN))
    )
    jobs = Jobs(database)
    template = {"spec": {"template": {"spec": {"containers": [{"name": "m", "image": "x:1"}]}}}}
    spec = {"queue": "containers", "jobTemplate": template, "retry": {"maxAttempts": 1}}
    for job in ("export", "ghost"):  # the ghost has no ScheduledJob
        await jobs.put(team, job, parse(JobSpec, spec), "test")
    await kube.create(
        {
            "apiVersion": "tickwork.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": "export", "namespace": team},
            "spec": spec,
        }
    )
    now = [0.0]
    async with runtime.authenticator("kubernetes", None, ReviewSettings()) as auth:
        services = runtime.api_services(Installation.over(database), auth, Metrics())
        server = HttpServer(create_app(services), port=0)
        url = await server.start()
        kube_client = await Kube.connect(
            kube.write_kubeconfig(tmp_path / "runner", token=JOB_RUNNER_TOKEN)
        )
        client = WorkerClient(url, JOB_RUNNER_TOKEN)
        settings = JobRunnerSettings(
            url=url,
            namespaces=(team,),
            queues=document.values["jobRunner"]["queues"],  # as the chart runs it
            wait_seconds=0.2,
            health_port=None,
        )
        runner = JobRunner(client, kube_client, settings, clock=lambda: now[0])
        runner.test_signals.init()
        controller = JobController(kube, team)
        stop = asyncio.Event()
        running = asyncio.create_task(runner.run(stop))
        try:

            async def enqueue(job: str) -> str:
                run, _ = await jobs.enqueue(team, job, EnqueueRequest(), "test")
                return str(run.run_id)

            async def ended(run_id: str) -> str:
                found = await runner.test_signals.completed.wait_for(lambda c: c[0] == run_id)
                return found[1]

            failing = await enqueue("export")
            await controller.fail(f"export-{failing}-1", "no ledger")
            assert await ended(failing) == "dead"
            deleted = await enqueue("export")
            await controller.created(f"export-{deleted}-1")
            await controller.delete(f"export-{deleted}-1")
            assert await ended(deleted) == "dead"
            cancelled = await enqueue("export")
            await controller.created(f"export-{cancelled}-1")
            await jobs.cancel(cancelled, "test")
            now[0] += settings.lease_seconds
            runner.wake()
            assert await ended(cancelled) == "cancelled"
            assert await ended(await enqueue("ghost")) == "dead"
            await kube.wait_until(lambda: len(kube.objects("events", team)) >= 4)
        finally:
            stop.set()
            await running
            await client.close()
            await kube_client.close()
            await server.stop()

    needed = rbac.used(kube.audit, runner_user.username)
    reviewed = {
        (
            a.get("group", ""),
            a.get("resource", ""),
            a.get("verb", ""),
            a.get("namespace", ""),
            a.get("name") or "",
        )
        for record in kube.audit
        if record.resource == "subjectaccessreviews"
        and record.body["spec"].get("user") == runner_user.username
        for a in [record.body["spec"].get("resourceAttributes") or {}]
    }
    assert ("tickwork.dev", "queues", "lease", team, "containers") in reviewed
    needed |= reviewed
    rbac.check_exact(needed, given)
