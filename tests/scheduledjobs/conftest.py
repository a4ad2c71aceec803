"""The operator in-process: the emulated Kubernetes API with the ScheduledJob CRD, a
real PostgreSQL (the ``database`` fixture), and ``Operator.run`` with a stop flag.

``operator_for(...)`` starts an operator and stops it at the end of the block; tests
drive objects through the emulator (``kube.create``, ``kube.patch``, HTTP for kubectl)
and look at what a user would: the object's status and Events, the stored definition.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml
from kube import emulator

from tickwork.core.clock import FrozenClock
from tickwork.core.records import Outcome
from tickwork.core.settings import OperatorSettings, WebhookSettings
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.scheduler import Scheduler
from tickwork.operator import crd
from tickwork.operator.cluster import Cluster
from tickwork.operator.runtime import Operator
from tickwork.store.database import Database

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
NAMESPACES = ("default", "team-a")


def example(name: str, namespace: str | None = None) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    if namespace is not None:
        document["metadata"]["namespace"] = namespace
    return document


def scheduled_job(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tickwork.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def renamed(document: dict[str, Any], name: str) -> dict[str, Any]:
    result = copy.deepcopy(document)
    result["metadata"]["name"] = name
    return result


def condition(obj: dict[str, Any] | None, kind: str = "Ready") -> dict[str, Any] | None:
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def ready(obj: dict[str, Any] | None) -> bool:
    found = condition(obj)
    return found is not None and found["status"] == "True"


def observed(generation: int) -> Callable[[dict[str, Any] | None], bool]:
    def check(obj: dict[str, Any] | None) -> bool:
        status = (obj or {}).get("status") or {}
        return status.get("observedGeneration") == generation and ready(obj)

    return check


def events_of(kube: emulator.Emulator, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """``(type, reason, message)`` of the Events on one object, oldest first."""
    posted = sorted(
        (e for e in kube.objects("events", namespace) if e["involvedObject"]["name"] == name),
        key=lambda e: int(e["metadata"]["resourceVersion"]),
    )
    return [(e["type"], e["reason"], e["message"]) for e in posted]


def events_with(
    kube: emulator.Emulator, name: str, reason: str, namespace: str = "default"
) -> list[tuple[str, str, str]]:
    """The Events of one ``reason`` on one object, oldest first."""
    return [e for e in events_of(kube, namespace, name) if e[1] == reason]


def status_of(kube: emulator.Emulator, name: str, namespace: str = "default") -> dict[str, Any]:
    obj = kube.get("sj", name, namespace)
    assert obj is not None
    return dict(obj.get("status") or {})


async def created(
    kube: emulator.Emulator, document: dict[str, Any], *, admit: bool = False
) -> dict[str, Any]:
    """Create ``document`` and wait until the operator has made its first generation Ready."""
    await kube.create(document, admit=admit)
    meta = document["metadata"]
    namespace = meta.get("namespace", "default")
    obj = await kube.wait_for("sj", meta["name"], observed(1), namespace=namespace)
    assert obj is not None
    return obj


async def edited(
    kube: emulator.Emulator,
    name: str,
    spec: dict[str, Any],
    generation: int,
    namespace: str = "default",
) -> dict[str, Any]:
    """Patch the object's spec and wait until the operator has made ``generation`` Ready."""
    await kube.patch("sj", name, {"spec": spec}, namespace=namespace)
    obj = await kube.wait_for("sj", name, observed(generation), namespace=namespace)
    assert obj is not None
    return obj


async def fail_for_good(jobs: Jobs, dispatcher: Dispatcher, name: str, runs: int = 1) -> None:
    """``runs`` runs of ``name`` enqueued, leased and failed without retry: dead."""
    for _ in range(runs):
        await jobs.enqueue("default", name, EnqueueRequest(), "test")
    leased = await dispatcher.lease(["default"], limit=runs, worker_id="worker-1", lease_seconds=30)
    assert len(leased) == runs
    answers = await dispatcher.complete(
        [
            CompleteItem(
                lease.run_id,
                lease.fencing_token,
                Outcome.failed,
                {"message": "poisoned"},
                retryable=False,
            )
            for lease in leased
        ]
    )
    assert {getattr(a, "state", None) for a in answers} == {"dead"}, answers


def quick(settings: kopf.OperatorSettings) -> None:
    settings.networking.request_timeout = 5
    settings.watching.connect_timeout = 2
    settings.watching.server_timeout = 30


@pytest.fixture
async def cluster_kube(kube: emulator.Emulator) -> emulator.Emulator:
    """The emulator serving the ScheduledJob CRD, with a second tenant namespace."""
    await kube.create(crd.definition())
    await kube.create_namespace("team-a")
    await kube.create_namespace("team-b")
    return kube


@pytest.fixture
async def cluster(cluster_kube: emulator.Emulator) -> AsyncIterator[Cluster]:
    assert cluster_kube.kubeconfig is not None
    connected = await Cluster.connect(str(cluster_kube.kubeconfig))
    yield connected
    await connected.close()


@pytest.fixture
def jobs(database: Database, clock: FrozenClock) -> Jobs:
    return Jobs(database, clock)


@pytest.fixture
def dispatcher(jobs: Jobs, clock: FrozenClock) -> Dispatcher:
    """A dispatcher on the test's store and clock, leasing as a worker would."""
    return Dispatcher(jobs.database, clock)


@pytest.fixture
def scheduler(jobs: Jobs, clock: FrozenClock) -> Scheduler:
    """The scheduler's passes on the test's store and clock, run when a test says."""
    return Scheduler(jobs.database, clock=clock)


OperatorFactory = Callable[..., contextlib.AbstractAsyncContextManager[Operator]]


@pytest.fixture
def operator_for(jobs: Jobs, cluster: Cluster) -> OperatorFactory:
    """``async with operator_for(status_interval=..., webhook=..., ...) as op:`` runs an
    operator for the block (namespaces default and team-a, webhook on a free port over
    plain HTTP, health on a free port, status pass every hour unless asked)."""

    @contextlib.asynccontextmanager
    async def start(**options: Any) -> AsyncIterator[Operator]:
        store = options.pop("jobs", jobs)
        webhook = options.pop(
            "webhook", WebhookSettings(port=None, bind="127.0.0.1", host="127.0.0.1", insecure=True)
        )
        settings = OperatorSettings(
            namespaces=options.pop("namespaces", NAMESPACES),
            webhook=WebhookSettings(port=0) if webhook is None else webhook,
            status_interval=options.pop("status_interval", 3600.0),
            health_port=options.pop("health_port", 0),
            health_bind="127.0.0.1",
            store_retry_seconds=options.pop("store_retry_seconds", 0.2),
        )
        assert not options, f"unknown options {options}"
        operator = Operator(store, cluster, settings, tune=quick)
        operator.test_signals.init()
        stop = asyncio.Event()
        running = asyncio.create_task(operator.run(stop))
        try:
            async with asyncio.timeout(10):
                waiting = asyncio.create_task(operator.ready.wait())
                await asyncio.wait({waiting, running}, return_when=asyncio.FIRST_COMPLETED)
                if running.done():
                    running.result()  # the start failed: show why
                if operator.webhook is not None and settings.webhook.manage:
                    await operator.webhook.configured.wait()
            yield operator
        finally:
            stop.set()
            async with asyncio.timeout(15):
                await running

    return start
