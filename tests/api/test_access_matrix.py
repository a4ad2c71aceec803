"""Every route and every dashboard action, called by every kind of principal, against the
declared access policy (``docs/security.md``).

One server takes both kinds of credentials, as ``--auth kubernetes`` with a tokens file
does: tokens-file principals (admin, team, worker, metrics) and ServiceAccounts checked
by the emulated API server's TokenReview and SubjectAccessReview. Every call acts on
the tenant ``acme``'s own job and runs, made fresh for the call, and its outcome is read
from what a user would see: the status, whether acme's job or run came back, and for
the dashboard's forms whether the change was made.

``DECLARED`` states the policy independently of ``tickwork.api.access``; a test checks
that the two agree, and the matrix checks that the server does what both say.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from kube.emulator import Emulator
from kube.reviews import User
from polling import eventually

from api.clients import HandClock
from tickwork.api import access, kubernetes_auth
from tickwork.api.access import Operation
from tickwork.api.app import create_app
from tickwork.api.auth import FirstMatch, Role, StaticTokens, TokenEntry
from tickwork.api.review_settings import ReviewSettings
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.api.ui import sessions
from tickwork.core.errors import NotFound
from tickwork.core.operations import Action, OperationState, checked
from tickwork.core.records import Lease, Outcome, Run, State
from tickwork.core.settings import ApiSettings
from tickwork.core.spec import JobSpec
from tickwork.engine.dispatch import CompleteItem
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import EnqueueRequest
from tickwork.engine.metrics import Metrics
from tickwork.engine.notifications import Target, Targets
from tickwork.engine.operations import Operations
from tickwork.engine.queues import Queues
from tickwork.store.database import Database

TENANT = "acme"
OTHER = "globex"
QUEUE = "default"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Seen(enum.Enum):
    """What a call came back with, as its caller sees it."""

    ok = "did it, on acme's own job or run"
    isolated = "answered, with none of acme's runs (its own tenant's instead)"
    absent = "404: as if acme's job or run did not exist"
    forbidden = "403"
    refused = "the dashboard's form came back with an error notice, nothing changed"
    unauthenticated = "401, or the dashboard's sign-in"


# The policy as docs/security.md states it: the tokens-file roles that may do each
# operation, and the RBAC grant a Kubernetes principal needs (verb, resource on
# tickwork.dev in the tenant's namespace; a path: a non-resource URL; None: none).
DECLARED: dict[str, tuple[frozenset[str], tuple[str, str] | None]] = {
    "jobs.list": (frozenset({"team", "admin"}), ("list", "scheduledjobs")),
    "jobs.get": (frozenset({"team", "admin"}), ("get", "scheduledjobs")),
    "jobs.put": (frozenset({"team", "admin"}), ("update", "scheduledjobs")),
    "jobs.delete": (frozenset({"team", "admin"}), ("delete", "scheduledjobs")),
    "jobs.pause": (frozenset({"team", "admin"}), ("update", "scheduledjobs")),
    "runs.create": (frozenset({"team", "admin"}), ("create", "runs")),
    "runs.list": (frozenset({"team", "admin"}), ("list", "runs")),
    "runs.get": (frozenset({"team", "worker", "admin"}), ("get", "runs")),
    "runs.cancel": (frozenset({"team", "admin"}), ("update", "runs")),
    "queues.lease": (frozenset({"worker", "admin"}), ("lease", "queues")),
    "queues.list": (frozenset({"team", "admin"}), ("list", "queues")),
    "queues.pause": (frozenset({"team", "admin"}), ("update", "queues")),
    "runs.report": (frozenset({"worker", "admin"}), ("lease", "queues")),
    "dlq.list": (frozenset({"team", "admin"}), ("list", "dlq")),
    "dlq.settle": (frozenset({"team", "admin"}), ("update", "dlq")),
    "audit.list": (frozenset({"team", "admin"}), ("list", "audit")),
    "notifications.list": (frozenset({"team", "admin"}), ("list", "notificationtargets")),
    "notifications.get": (frozenset({"team", "admin"}), ("get", "notificationtargets")),
    "notifications.put": (frozenset({"team", "admin"}), ("update", "notificationtargets")),
    "notifications.delete": (frozenset({"team", "admin"}), ("delete", "notificationtargets")),
    "operations.create": (frozenset({"team", "admin"}), ("create", "operations")),
    "operations.list": (frozenset({"team", "admin"}), ("list", "operations")),
    "operations.get": (frozenset({"team", "admin"}), ("get", "operations")),
    "operations.cancel": (frozenset({"team", "admin"}), ("update", "operations")),
    "metrics.read": (frozenset({"admin", "metrics"}), ("get", "/metrics")),
    "openapi.read": (frozenset({"team", "worker", "admin", "metrics"}), None),
    "dashboard.use": (frozenset({"team", "admin"}), None),
}


@dataclass(frozen=True)
class Caller:
    """A kind of principal. ``kind``: anonymous, a tokens-file role, or kubernetes;
    ``grants``: a ServiceAccount's RBAC ("all" in its namespace, "exact": what the
    operation needs in acme and nothing else, "none")."""

    name: str
    kind: str
    tenant: str = TENANT
    token: str | None = None
    queues: tuple[str, ...] = ()
    grants: str = ""

    @property
    def kubernetes(self) -> bool:
        return self.kind == "kubernetes"


CALLERS = [
    Caller("anonymous", "anonymous"),
    Caller("admin", "admin", "ops", "matrix-admin-token-0123456789"),
    Caller("team", "team", TENANT, "matrix-team-acme-0123456789"),
    Caller("team of another tenant", "team", OTHER, "matrix-team-globex-0123456789"),
    Caller("worker", "worker", TENANT, "matrix-worker-acme-0123456789", (QUEUE,)),
    Caller("worker of another queue", "worker", TENANT, "matrix-worker-other-0123456789", ("x",)),
    Caller("worker of another tenant", "worker", OTHER, "matrix-worker-globex-012345", (QUEUE,)),
    Caller("metrics scraper", "metrics", "ops", "matrix-metrics-token-0123456789"),
    Caller(
        "ServiceAccount with every grant", "kubernetes", TENANT, "sa-acme-all-0123456789", (), "all"
    ),
    Caller(
        "ServiceAccount with the one grant",
        "kubernetes",
        TENANT,
        "sa-acme-exact-012345",
        (),
        "exact",
    ),
    Caller(
        "ServiceAccount without grants", "kubernetes", TENANT, "sa-acme-none-0123456789", (), "none"
    ),
    Caller(
        "ServiceAccount of another namespace",
        "kubernetes",
        OTHER,
        "sa-globex-all-012345",
        (),
        "all",
    ),
    # A namespace's ServiceAccount that RBAC lets act in acme (a RoleBinding there).
    Caller(
        "ServiceAccount granted acme from another namespace",
        "kubernetes",
        OTHER,
        "sa-globex-in-acme-012345",
        (),
        TENANT,
    ),
]


class Cluster:
    """RBAC as the emulated API server answers it: per user, grants by namespace."""

    def __init__(self, kube: Emulator) -> None:
        self.kube = kube
        self.exact: set[tuple[str, str, str]] = set()
        self.users = {c.token: c for c in CALLERS if c.kubernetes}
        for caller in CALLERS:
            if caller.kubernetes and caller.token is not None:
                name = caller.grants
                kube.tokens[caller.token] = User.service_account(caller.tenant, name)
        kube.access.decide = self.decide

    def decide(self, spec: dict[str, Any]) -> tuple[bool, str]:
        namespace, _, grants = spec["user"].removeprefix("system:serviceaccount:").partition(":")
        attrs = spec.get("resourceAttributes")
        if attrs is None:
            path = spec["nonResourceAttributes"]
            key = ("", path["verb"], path["path"])
        else:
            assert attrs["group"] == "tickwork.dev", attrs
            key = (attrs["namespace"], attrs["verb"], attrs["resource"])
        if grants == "all":
            return key[0] in ("", namespace), "every grant"
        if grants == "exact":
            return key in self.exact, "the one grant"
        if grants == TENANT:
            return key[0] in ("", TENANT), "every grant in acme"
        return False, "no grant"


@dataclass
class World:
    """The server, and how each call makes what it acts on."""

    url: str
    services: Services
    app: FastAPI
    cluster: Cluster
    clock: HandClock
    names: itertools.count[int] = field(default_factory=itertools.count)

    def headers(self, caller: Caller) -> dict[str, str]:
        return {} if caller.token is None else {"Authorization": f"Bearer {caller.token}"}

    def query(self, caller: Caller) -> dict[str, str]:
        """A caller of another tenant names acme explicitly (an admin may; others may
        not, which is what the matrix checks)."""
        return {} if caller.tenant == TENANT else {"tenant": TENANT}

    async def job(self, **spec: Any) -> str:
        name = f"job-{next(self.names)}"
        document = {"queue": QUEUE, "retry": {"maxAttempts": 1}} | spec
        await self.services.jobs.put(TENANT, name, JobSpec.model_validate(document), "matrix")
        return name

    async def run(self) -> Run:
        run, _ = await self.services.jobs.enqueue(TENANT, await self.job(), EnqueueRequest(), "t")
        return run

    async def leased(self) -> Lease:
        await self.run()
        # Callers run at once: another's claim may take this run, while this claim's
        # snapshot predates that caller's own run (SKIP LOCKED then finds none). Ask
        # again: some run of acme's is there for each caller.
        got: list[Lease] = []

        async def leased_one() -> bool:
            got[:] = await self.services.dispatcher.lease(
                [QUEUE], limit=1, worker_id="matrix", lease_seconds=300, tenant=TENANT
            )
            return bool(got)

        await eventually(leased_one, every=0.01, what="a run of acme's leased")
        return got[0]

    async def dead(self) -> Run:
        lease = await self.leased()
        item = CompleteItem(lease.run_id, lease.fencing_token, Outcome.failed, {"message": "x"})
        [result] = await self.services.dispatcher.complete([item])
        assert not isinstance(result, Exception), result
        run, _ = await self.services.jobs.run(lease.run_id)
        assert run.state is State.dead
        return run

    async def state(self, run_id: str) -> State:
        run, _ = await self.services.jobs.run(run_id)
        return run.state


# --- the API's routes ---

Shape = str  # "tenant": names acme in the path or query; "run": a run by id; "lease";
# "report": a leased run's heartbeat or completion; "ops": not tenant-bound; "public".
Call = Callable[[World, httpx.AsyncClient, Caller], Awaitable[Seen]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # as the app declares it
    operations: tuple[Operation, ...]
    shape: Shape
    call: Call


def status_seen(response: httpx.Response, found: bool = True) -> Seen:
    if response.status_code == 401:
        return Seen.unauthenticated
    if response.status_code == 403:
        return Seen.forbidden
    if response.status_code == 404:
        return Seen.absent
    assert response.status_code < 300, response.text
    return Seen.ok if found else Seen.isolated


async def list_jobs(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    name = await w.job()
    answer = await http.get("/v1/jobs", params=w.query(c) | {"limit": 500})
    return status_seen(answer, answer.is_success and name in answer.text)


async def put_job(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    name = await w.job()
    answer = await http.put(f"/v1/jobs/{name}", params=w.query(c), json={"queue": "changed"})
    return status_seen(answer, answer.is_success and answer.json()["tenant"] == TENANT)


async def get_job(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    name = await w.job()
    return status_seen(await http.get(f"/v1/jobs/{name}", params=w.query(c)))


async def delete_job(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    name = await w.job()
    return status_seen(await http.delete(f"/v1/jobs/{name}", params=w.query(c)))


def pause_job(verb: str) -> Call:
    async def call(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
        name = await w.job()
        return status_seen(await http.post(f"/v1/jobs/{name}:{verb}", params=w.query(c)))

    return call


async def enqueue(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    name = await w.job()
    answer = await http.post(f"/v1/jobs/{name}/runs", params=w.query(c))
    return status_seen(answer, answer.is_success and answer.json()["tenant"] == TENANT)


async def backfill(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    name = await w.job(schedule={"cron": "0 2 * * *"})
    span = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z"}
    answer = await http.post(f"/v1/jobs/{name}:backfill", params=w.query(c), json=span)
    runs, _ = await w.services.jobs.runs_of_job(TENANT, name, None, None, 10)
    return status_seen(answer, answer.is_success and len(runs) == 2)


async def enqueue_batch(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    name = await w.job()
    answer = await http.post(f"/v1/jobs/{name}/runs:batch", params=w.query(c), json={"runs": [{}]})
    return status_seen(answer, answer.is_success and "runId" in answer.text)


async def list_runs(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    run = await w.run()
    answer = await http.get(f"/v1/jobs/{run.job}/runs", params=w.query(c))
    return status_seen(answer, answer.is_success and run.run_id in answer.text)


async def get_run(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    run = await w.run()
    return status_seen(await http.get(f"/v1/runs/{run.run_id}"))


async def cancel_run(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    run = await w.run()
    seen = status_seen(await http.post(f"/v1/runs/{run.run_id}:cancel"))
    assert (await w.state(run.run_id) is State.cancelled) == (seen is Seen.ok)
    return seen


async def lease(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    await w.run()
    answer = await http.post("/v1/lease", json={"queues": [QUEUE], "max": 100})
    leases = answer.json().get("leases", []) if answer.is_success else []
    return status_seen(answer, any(item["tenant"] == TENANT for item in leases))


def report(single: str | None, batch: str | None) -> Call:
    async def call(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
        held = await w.leased()
        body: dict[str, Any] = {"fencingToken": held.fencing_token}
        body |= {"extendSeconds": 60} if "heartbeat" in (single or batch or "") else {}
        body |= {"outcome": "succeeded"} if "complete" in (single or batch or "") else {}
        if single is not None:
            seen = status_seen(await http.post(f"/v1/runs/{held.run_id}/{single}", json=body))
        else:
            assert batch is not None
            answer = await http.post(batch, json={"items": [{"runId": held.run_id, **body}]})
            seen = status_seen(answer)
            if seen is Seen.ok and "problem" in answer.json()["items"][0]:
                assert answer.json()["items"][0]["problem"]["status"] == 404, answer.text
                seen = Seen.absent
        finished = await w.state(held.run_id) is State.succeeded
        assert finished == (seen is Seen.ok and "complete" in (single or batch or ""))
        return seen

    return call


async def list_dead(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    run = await w.dead()
    answer = await http.get("/v1/dlq", params=w.query(c) | {"limit": 500})
    return status_seen(answer, answer.is_success and run.run_id in answer.text)


def settle(verb: str) -> Call:
    async def call(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
        run = await w.dead()
        seen = status_seen(await http.post(f"/v1/dlq/{run.run_id}:{verb}"))
        assert (await w.state(run.run_id) is not State.dead) == (seen is Seen.ok)
        return seen

    return call


async def list_audit(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    name = await w.job()
    await w.services.jobs.set_paused(TENANT, name, True, "matrix")
    answer = await http.get("/v1/audit", params=w.query(c) | {"job": name})
    return status_seen(answer, answer.is_success and name in answer.text)


async def runs_by_state(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    run = await w.dead()
    answer = await http.get("/v1/runs", params=w.query(c) | {"state": "dead", "limit": 500})
    return status_seen(answer, answer.is_success and run.run_id in answer.text)


async def create_operation(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    run = await w.dead()
    body = {"action": "replay", "filter": {"job": run.job}}
    answer = await http.post("/v1/operations", params=w.query(c), json=body)
    return status_seen(answer, answer.is_success and answer.json()["total"] == 1)


async def acme_operation(w: World) -> str:
    run = await w.dead()
    made = await Operations(w.services.engine.database).create(
        TENANT, Action.discard, checked(action=Action.discard, job=run.job), "matrix"
    )
    return made.id


async def list_operations(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    made = await acme_operation(w)
    answer = await http.get("/v1/operations", params=w.query(c) | {"limit": 500})
    return status_seen(answer, answer.is_success and made in answer.text)


async def get_operation(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    made = await acme_operation(w)
    return status_seen(await http.get(f"/v1/operations/{made}", params=w.query(c)))


async def cancel_operation(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    made = await acme_operation(w)
    seen = status_seen(await http.post(f"/v1/operations/{made}:cancel", params=w.query(c)))
    state = (await Operations(w.services.engine.database).get(TENANT, made)).state
    assert (state is OperationState.cancelled) == (seen is Seen.ok)
    return seen


def queue_action(verb: str) -> Call:
    """Pause or resume a queue of acme's made for the call (never the matrix's own)."""

    async def call(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
        queue = f"q-{next(w.names)}"
        engine = Queues(w.services.engine.database, w.services.engine.clock)
        if verb == "resume":
            await engine.pause(TENANT, queue, "matrix")
        answer = await http.post(f"/v1/queues/{queue}:{verb}", params=w.query(c))
        paused = any(q.queue == queue and q.paused for q in await engine.list(TENANT))
        await engine.resume(TENANT, queue, "matrix")
        return status_seen(answer, answer.is_success and paused == (verb == "pause"))

    return call


async def list_queues(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
    queue = f"q-{next(w.names)}"
    engine = Queues(w.services.engine.database, w.services.engine.clock)
    await engine.pause(TENANT, queue, "matrix")
    answer = await http.get("/v1/queues", params=w.query(c))
    await engine.resume(TENANT, queue, "matrix")
    return status_seen(answer, answer.is_success and queue in answer.text)


NOW = datetime(2026, 3, 15, tzinfo=UTC)


def notification_target(method: str) -> Call:
    """List, read, write or delete a notification target of acme's made for the call."""

    async def call(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
        name = f"t-{next(w.names)}"
        targets = Targets(w.services.engine.database, w.services.engine.clock)
        made = Target(name, "http://127.0.0.1:9/hook", "json", None, False, NOW, "matrix")
        if method != "PUT":
            await targets.put(TENANT, made)
        path = "/v1/notification-targets" + ("" if method == "LIST" else f"/{name}")
        body = {"url": "http://127.0.0.1:9/other"} if method == "PUT" else None
        answer = await http.request(
            "GET" if method == "LIST" else method, path, params=w.query(c), json=body
        )
        found = await targets.get(TENANT, name)
        with contextlib.suppress(NotFound):
            await targets.delete(TENANT, name)
        effect = {
            "LIST": name in answer.text,
            "GET": name in answer.text,
            "PUT": found is not None,
            "DELETE": found is None,
        }[method]
        return status_seen(answer, answer.is_success and effect)

    return call


def plain(path: str) -> Call:
    async def call(w: World, http: httpx.AsyncClient, c: Caller) -> Seen:
        return status_seen(await http.get(path))

    return call


ROUTES = [
    Route("GET", "/v1/jobs", (Operation.list_jobs,), "tenant", list_jobs),
    Route("PUT", "/v1/jobs/{name}", (Operation.put_job,), "tenant", put_job),
    Route("GET", "/v1/jobs/{name}", (Operation.get_job,), "tenant", get_job),
    Route("DELETE", "/v1/jobs/{name}", (Operation.delete_job,), "tenant", delete_job),
    Route("POST", "/v1/jobs/{name}:pause", (Operation.pause_job,), "tenant", pause_job("pause")),
    Route("POST", "/v1/jobs/{name}:resume", (Operation.pause_job,), "tenant", pause_job("resume")),
    Route("POST", "/v1/jobs/{name}/runs", (Operation.enqueue,), "tenant", enqueue),
    Route("POST", "/v1/jobs/{name}:backfill", (Operation.enqueue,), "tenant", backfill),
    Route("POST", "/v1/jobs/{name}/runs:batch", (Operation.enqueue,), "tenant", enqueue_batch),
    Route("GET", "/v1/jobs/{name}/runs", (Operation.list_runs,), "tenant", list_runs),
    Route("GET", "/v1/runs/{runId}", (Operation.get_run,), "run", get_run),
    Route("POST", "/v1/runs/{runId}:cancel", (Operation.cancel_run,), "run", cancel_run),
    Route("POST", "/v1/lease", (Operation.lease,), "lease", lease),
    Route(
        "POST",
        "/v1/runs/{runId}/heartbeat",
        (Operation.report,),
        "report",
        report("heartbeat", None),
    ),
    Route(
        "POST", "/v1/runs/{runId}/complete", (Operation.report,), "report", report("complete", None)
    ),
    Route(
        "POST",
        "/v1/runs:heartbeat",
        (Operation.report,),
        "report",
        report(None, "/v1/runs:heartbeat"),
    ),
    Route(
        "POST",
        "/v1/runs:complete",
        (Operation.report,),
        "report",
        report(None, "/v1/runs:complete"),
    ),
    Route("GET", "/v1/queues", (Operation.list_queues,), "tenant", list_queues),
    Route(
        "POST",
        "/v1/queues/{queue}:pause",
        (Operation.pause_queue,),
        "tenant",
        queue_action("pause"),
    ),
    Route(
        "POST",
        "/v1/queues/{queue}:resume",
        (Operation.pause_queue,),
        "tenant",
        queue_action("resume"),
    ),
    Route(
        "GET",
        "/v1/notification-targets",
        (Operation.list_targets,),
        "tenant",
        notification_target("LIST"),
    ),
    Route(
        "GET",
        "/v1/notification-targets/{name}",
        (Operation.get_target,),
        "tenant",
        notification_target("GET"),
    ),
    Route(
        "PUT",
        "/v1/notification-targets/{name}",
        (Operation.put_target,),
        "tenant",
        notification_target("PUT"),
    ),
    Route(
        "DELETE",
        "/v1/notification-targets/{name}",
        (Operation.delete_target,),
        "tenant",
        notification_target("DELETE"),
    ),
    Route("GET", "/v1/dlq", (Operation.list_dead,), "tenant", list_dead),
    Route("POST", "/v1/dlq/{runId}:replay", (Operation.settle_dead,), "run", settle("replay")),
    Route("POST", "/v1/dlq/{runId}:discard", (Operation.settle_dead,), "run", settle("discard")),
    Route("GET", "/v1/audit", (Operation.list_audit,), "tenant", list_audit),
    Route("GET", "/v1/runs", (Operation.list_runs,), "tenant", runs_by_state),
    Route("POST", "/v1/operations", (Operation.create_operation,), "tenant", create_operation),
    Route("GET", "/v1/operations", (Operation.list_operations,), "tenant", list_operations),
    Route(
        "GET",
        "/v1/operations/{operationId}",
        (Operation.get_operation,),
        "tenant",
        get_operation,
    ),
    Route(
        "POST",
        "/v1/operations/{operationId}:cancel",
        (Operation.cancel_operation,),
        "tenant",
        cancel_operation,
    ),
    Route("GET", "/metrics", (Operation.read_metrics,), "ops", plain("/metrics")),
    Route("GET", "/openapi.json", (Operation.read_openapi,), "ops", plain("/openapi.json")),
    Route("GET", "/healthz", (), "public", plain("/healthz")),
    Route("GET", "/readyz", (), "public", plain("/readyz")),
]


def grants_of(operations: tuple[Operation, ...]) -> set[tuple[str, str, str]]:
    """The grants in acme a ServiceAccount needs for ``operations``, and no more."""
    found = set()
    for operation in operations:
        _, grant = DECLARED[operation.value]
        if grant is not None:
            verb, resource = grant
            found.add(
                ("", verb, resource) if resource.startswith("/") else (TENANT, verb, resource)
            )
    return found


def expected(route: Route, caller: Caller) -> Seen:
    """What ``caller`` should see of ``route``, from ``DECLARED``."""
    if route.shape == "public":
        return Seen.ok
    if caller.kind == "anonymous":
        return Seen.unauthenticated
    roles_ok = all(caller.kind in DECLARED[op.value][0] for op in route.operations)
    if not caller.kubernetes:
        if not roles_ok:
            return Seen.forbidden
        if caller.kind == "admin" or route.shape == "ops":
            return Seen.ok
        if route.shape == "tenant":
            return Seen.ok if caller.tenant == TENANT else Seen.forbidden
        if route.shape == "lease":
            if caller.tenant != TENANT:
                return Seen.isolated
            return Seen.ok if QUEUE in caller.queues else Seen.forbidden
        # A run by id, or a leased run: outside the caller's tenant or queues it is absent.
        inside = caller.tenant == TENANT and (caller.kind != "worker" or QUEUE in caller.queues)
        return Seen.ok if inside else Seen.absent
    granted = caller.grants in ("exact", TENANT) or (
        caller.grants == "all" and caller.tenant == TENANT
    )
    if route.shape == "ops":
        grants = grants_of(route.operations)
        allowed = caller.grants in ("all", "exact", TENANT)
        return Seen.ok if allowed or not grants else Seen.forbidden
    if route.shape == "lease" and caller.tenant != TENANT:
        # Leases in its own namespace only, where only "all" grants it anything.
        return Seen.isolated if caller.grants == "all" else Seen.forbidden
    if route.shape == "report" and caller.tenant != TENANT:
        return Seen.absent  # and reports on its own namespace's runs only
    if granted:
        return Seen.ok
    return Seen.forbidden if route.shape in ("tenant", "lease") else Seen.absent


# --- the dashboard ---


@dataclass(frozen=True)
class Page:
    method: str
    path: str
    operations: tuple[Operation, ...]
    call: Callable[[World, httpx.AsyncClient, Caller, str], Awaitable[Seen]]


def page_seen(response: httpx.Response, marker: str) -> Seen:
    if response.status_code == 303 and "/ui/login" in response.headers["location"]:
        return Seen.unauthenticated
    if response.status_code in (403, 404):
        return Seen.forbidden if response.status_code == 403 else Seen.absent
    assert response.status_code == 200, response.text
    return Seen.ok if marker in response.text else Seen.isolated


def ui_query(c: Caller) -> dict[str, str]:
    return {} if c.tenant == TENANT else {"tenant": TENANT}


async def overview_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    return page_seen(await http.get("/ui/", params=ui_query(c)), "Overview")


async def jobs_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    name = await w.job()
    return page_seen(await http.get("/ui/jobs", params=ui_query(c) | {"q": name}), name)


async def job_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    run = await w.run()
    return page_seen(await http.get(f"/ui/jobs/{run.job}", params=ui_query(c)), run.run_id)


def run_page(suffix: str) -> Callable[[World, httpx.AsyncClient, Caller, str], Awaitable[Seen]]:
    async def call(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
        run = await w.run()
        answer = await http.get(f"/ui/runs/{run.run_id}{suffix}")
        return page_seen(answer, run.run_id if not suffix else "null")

    return call


async def dlq_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    run = await w.dead()
    return page_seen(await http.get("/ui/dlq", params=ui_query(c) | {"job": run.job}), run.run_id)


async def audit_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    name = await w.job()
    await w.services.jobs.set_paused(TENANT, name, True, "matrix")
    return page_seen(await http.get("/ui/audit", params=ui_query(c) | {"job": name}), name)


async def form(http: httpx.AsyncClient, path: str, c: Caller, csrf: str, **fields: str) -> Seen:
    answer = await http.post(path, data={"csrf": csrf, **ui_query(c), **fields})
    if answer.status_code == 401:
        return Seen.unauthenticated  # a form without a session: "sign in again"
    if answer.status_code == 403:
        return Seen.forbidden
    assert answer.status_code in (200, 303), answer.text
    return Seen.ok


def action_seen(posted: Seen, changed: bool) -> Seen:
    if posted is not Seen.ok:
        return posted
    return Seen.ok if changed else Seen.refused


def pause_action(verb: str) -> Callable[[World, httpx.AsyncClient, Caller, str], Awaitable[Seen]]:
    async def call(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
        name = await w.job(paused=verb == "resume")
        posted = await form(http, f"/ui/jobs/{name}/{verb}", c, csrf)
        view = await w.services.jobs.get(TENANT, name)
        return action_seen(posted, view.definition.paused is (verb == "pause"))

    return call


async def enqueue_action(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    name = await w.job()
    posted = await form(http, f"/ui/jobs/{name}/enqueue", c, csrf)
    runs, _ = await w.services.jobs.runs_of_job(TENANT, name, None, None, 10)
    return action_seen(posted, bool(runs))


async def cancel_action(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    run = await w.run()
    posted = await form(http, f"/ui/runs/{run.run_id}/cancel", c, csrf)
    return action_seen(posted, await w.state(run.run_id) is State.cancelled)


async def confirm_action(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    run = await w.dead()
    answer = await http.post(
        "/ui/dlq/confirm", data={"csrf": csrf, "action": "replay", "run": run.run_id} | ui_query(c)
    )
    if answer.status_code == 401:
        return Seen.unauthenticated
    if answer.status_code == 403:
        return Seen.forbidden
    # The confirmation page lists the runs it would act on; a refusal redirects.
    return Seen.ok if answer.status_code == 200 and run.run_id in answer.text else Seen.refused


def settle_action(verb: str) -> Callable[[World, httpx.AsyncClient, Caller, str], Awaitable[Seen]]:
    async def call(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
        run = await w.dead()
        posted = await form(http, f"/ui/dlq/{verb}", c, csrf, run=run.run_id)
        return action_seen(posted, await w.state(run.run_id) is not State.dead)

    return call


async def runs_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    run = await w.dead()
    query = ui_query(c) | {"state": "dead", "job": run.job}
    return page_seen(await http.get("/ui/runs", params=query), run.run_id)


async def operations_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    made = await acme_operation(w)
    return page_seen(await http.get("/ui/operations", params=ui_query(c)), made)


async def operation_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    made = await acme_operation(w)
    return page_seen(await http.get(f"/ui/operations/{made}", params=ui_query(c)), made)


async def confirm_bulk_action(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    run = await w.dead()
    data = {"csrf": csrf, "action": "replay", "state": "dead", "job": run.job} | ui_query(c)
    answer = await http.post("/ui/operations/confirm", data=data)
    if answer.status_code == 401:
        return Seen.unauthenticated
    if answer.status_code == 403:
        return Seen.forbidden
    # The confirmation repeats the filter and the count; a refusal redirects.
    return Seen.ok if answer.status_code == 200 and run.job in answer.text else Seen.refused


async def bulk_action(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    run = await w.dead()
    posted = await form(http, "/ui/operations", c, csrf, action="discard", job=run.job)
    made = await Operations(w.services.engine.database).recent(TENANT, 500)
    return action_seen(posted, any(op.filter.job == run.job for op in made))


async def confirm_stop_action(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    made = await acme_operation(w)
    answer = await http.post(
        f"/ui/operations/{made}/confirm-cancel", data={"csrf": csrf} | ui_query(c)
    )
    if answer.status_code == 401:
        return Seen.unauthenticated
    if answer.status_code == 403:
        return Seen.forbidden
    return Seen.ok if answer.status_code == 200 and made in answer.text else Seen.refused


async def stop_action(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    made = await acme_operation(w)
    posted = await form(http, f"/ui/operations/{made}/cancel", c, csrf)
    state = (await Operations(w.services.engine.database).get(TENANT, made)).state
    return action_seen(posted, state is OperationState.cancelled)


def queue_form(verb: str) -> Callable[[World, httpx.AsyncClient, Caller, str], Awaitable[Seen]]:
    async def call(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
        queue = f"q-{next(w.names)}"
        engine = Queues(w.services.engine.database, w.services.engine.clock)
        if verb == "resume":
            await engine.pause(TENANT, queue, "matrix")
        posted = await form(http, f"/ui/queues/{queue}/{verb}", c, csrf)
        paused = any(q.queue == queue and q.paused for q in await engine.list(TENANT))
        await engine.resume(TENANT, queue, "matrix")
        return action_seen(posted, paused == (verb == "pause"))

    return call


async def notifications_page(w: World, http: httpx.AsyncClient, c: Caller, csrf: str) -> Seen:
    answer = await http.get("/ui/notifications", params=ui_query(c))
    return page_seen(answer, f'<span class="sub">tenant {TENANT}</span>')


PAGES = [
    Page("GET", "/ui/", (Operation.list_runs,), overview_page),
    Page("POST", "/ui/queues/{queue}/pause", (Operation.pause_queue,), queue_form("pause")),
    Page("POST", "/ui/queues/{queue}/resume", (Operation.pause_queue,), queue_form("resume")),
    Page("GET", "/ui/runs", (Operation.list_runs,), runs_page),
    Page("GET", "/ui/operations", (Operation.list_operations,), operations_page),
    Page("GET", "/ui/operations/{operation_id}", (Operation.get_operation,), operation_page),
    Page("POST", "/ui/operations/confirm", (Operation.create_operation,), confirm_bulk_action),
    Page("POST", "/ui/operations", (Operation.create_operation,), bulk_action),
    Page(
        "POST",
        "/ui/operations/{operation_id}/confirm-cancel",
        (Operation.cancel_operation,),
        confirm_stop_action,
    ),
    Page(
        "POST", "/ui/operations/{operation_id}/cancel", (Operation.cancel_operation,), stop_action
    ),
    Page("GET", "/ui/jobs", (Operation.list_jobs,), jobs_page),
    Page("GET", "/ui/jobs/{name}", (Operation.get_job, Operation.list_runs), job_page),
    Page("GET", "/ui/runs/{run_id}", (Operation.get_run,), run_page("")),
    Page("GET", "/ui/runs/{run_id}/payload", (Operation.get_run,), run_page("/payload")),
    Page("GET", "/ui/dlq", (Operation.list_dead,), dlq_page),
    Page("GET", "/ui/audit", (Operation.list_audit,), audit_page),
    Page("GET", "/ui/notifications", (Operation.list_audit,), notifications_page),
    Page("POST", "/ui/jobs/{name}/pause", (Operation.pause_job,), pause_action("pause")),
    Page("POST", "/ui/jobs/{name}/resume", (Operation.pause_job,), pause_action("resume")),
    Page("POST", "/ui/jobs/{name}/enqueue", (Operation.enqueue,), enqueue_action),
    Page("POST", "/ui/runs/{run_id}/cancel", (Operation.cancel_run,), cancel_action),
    Page("POST", "/ui/dlq/confirm", (Operation.settle_dead,), confirm_action),
    Page("POST", "/ui/dlq/replay", (Operation.settle_dead,), settle_action("replay")),
    Page("POST", "/ui/dlq/discard", (Operation.settle_dead,), settle_action("discard")),
]
# Routes of the dashboard with no policy of their own: the sign-in and sign-out forms
# (checked by signing in below), its assets, and the pages that are not there.
UNGUARDED_PAGES = {
    ("GET", "/ui"),
    ("GET", "/ui/static/{name}"),
    ("GET", "/ui/{rest:path}"),
    ("GET", "/ui/login"),
    ("POST", "/ui/login"),
    ("POST", "/ui/logout"),
}
RUN_PAGES = {"/ui/runs/{run_id}", "/ui/runs/{run_id}/payload", "/ui/runs/{run_id}/cancel"}
DLQ_PAGES = {"/ui/dlq/confirm", "/ui/dlq/replay", "/ui/dlq/discard"}


def expected_page(page: Page, caller: Caller) -> Seen:
    if caller.kind == "anonymous":
        return Seen.unauthenticated
    by_id = page.path in RUN_PAGES | DLQ_PAGES
    if not caller.kubernetes:
        if caller.kind == "admin" or caller.tenant == TENANT:
            return Seen.ok
        # Another tenant's team: acme is not its to act for (a form naming it is refused
        # outright), and acme's runs are absent from its pages.
        if page.method == "POST":
            return Seen.forbidden
        return Seen.absent if by_id else Seen.forbidden
    granted = caller.grants in ("exact", TENANT) or (
        caller.grants == "all" and caller.tenant == TENANT
    )
    if granted:
        return Seen.ok
    if page.method == "POST":
        return Seen.refused  # a notice on the page the form came from
    return Seen.absent if by_id else Seen.forbidden


# --- the server ---


@pytest.fixture
async def world(kube: Emulator, database: Database) -> AsyncIterator[World]:
    cluster = Cluster(kube)
    clock = HandClock()
    api = await kubernetes_auth.api_client(kube.kubeconfig)
    reviews = kubernetes_auth.KubernetesAuth(
        api, ReviewSettings(cache_seconds=10, negative_cache_seconds=5), clock=clock
    )
    tokens = StaticTokens(
        TokenEntry(
            token=c.token,
            tenant=c.tenant,
            role=Role(c.kind),
            queues=list(c.queues) or None,
        )
        for c in CALLERS
        if c.token is not None and not c.kubernetes
    )
    services = Services(
        engine=Installation.over(database),
        authenticator=FirstMatch([tokens, reviews]),
        metrics=Metrics(),
        # Anonymous calls fail by the hundred here: the throttle has its own tests.
        settings=ApiSettings(auth_failure_rate=0, ui_secret="matrix-secret-" + "x" * 32),
    )
    app = create_app(services)
    server = HttpServer(app, port=0)
    url = await server.start()
    try:
        yield World(url, services, app, cluster, clock)
    finally:
        await server.stop()
        await api.close()


SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def documented_policy() -> dict[str, tuple[frozenset[str], tuple[str, str] | None]]:
    """The policy table of docs/security.md, as ``DECLARED`` writes it."""
    found = {}
    for line in SECURITY_DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"`[a-z]+\.[a-z]+`", cells[0]):
            continue
        roles = frozenset(re.sub(r"\([^)]*\)", "", cells[2]).replace(" ", "").split(","))
        grant = re.findall(r"`([^`]+)`", cells[3])[:2]
        found[cells[0].strip("`")] = (roles, (grant[0], grant[1]) if grant else None)
    return found


def test_the_security_page_documents_the_declared_policy() -> None:
    assert documented_policy() == DECLARED


def test_the_declared_policy_is_the_one_the_code_applies() -> None:
    assert set(DECLARED) == {operation.value for operation in Operation}
    for operation, rule in access.POLICY.items():
        roles, grant = DECLARED[operation.value]
        assert {role.value for role in rule.roles} == roles, operation
        code_grant = (rule.verb, rule.path or rule.resource) if rule.verb else None
        assert code_grant == grant, operation


def flattened(routes: list[Any], prefix: str = "") -> set[tuple[str, str]]:
    """(method, path) of every route, through routers included in routers."""
    found: set[tuple[str, str]] = set()
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            found |= flattened(included.routes, prefix + route.include_context.prefix)
            continue
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD":
                found.add((method, prefix + route.path))
    return found


async def test_every_route_of_the_app_is_in_the_matrix(world: World) -> None:
    declared = flattened(world.app.routes)
    covered = {(r.method, r.path) for r in ROUTES} | {(p.method, p.path) for p in PAGES}
    assert declared == covered | UNGUARDED_PAGES


async def test_every_api_route_for_every_principal(world: World) -> None:
    clients = {
        c.name: httpx.AsyncClient(base_url=world.url, headers=world.headers(c)) for c in CALLERS
    }

    async def one(route: Route, caller: Caller) -> str | None:
        seen = await route.call(world, clients[caller.name], caller)
        want = expected(route, caller)
        if seen is want:
            return None
        return f"{route.method} {route.path} as {caller.name}: {seen.name}, not {want.name}"

    wrong: list[str | None] = []
    try:
        for route in ROUTES:
            world.cluster.exact = grants_of(route.operations)
            world.clock.now += 100  # no RBAC answer outlives the grants it was given under
            if route.shape == "lease":  # leases would take each other's runs
                wrong += [await one(route, caller) for caller in CALLERS]
            else:
                wrong += await asyncio.gather(*(one(route, caller) for caller in CALLERS))
    finally:
        await asyncio.gather(*(client.aclose() for client in clients.values()))
    assert not [line for line in wrong if line], "\n".join(filter(None, wrong))
    # The matrix's size, for the record: every route for every principal.
    assert len(wrong) == len(ROUTES) * len(CALLERS) == 37 * 13


async def sign_in(world: World, http: httpx.AsyncClient, caller: Caller) -> str | None:
    """Sign ``caller`` in; its forms' CSRF token, or None when the dashboard refused it."""
    form_page = await http.get("/ui/login")
    found = _CSRF.search(form_page.text)
    assert found is not None
    answer = await http.post(
        "/ui/login", data={"token": caller.token or "", "csrf": found[1], "next": "/ui/"}
    )
    if answer.status_code != 303:
        assert answer.status_code in (401, 403), answer.text
        return None
    sealer = world.app.state.dashboard.sealer
    session = sealer.session(http.cookies.get(sessions.SESSION_COOKIE))
    assert session is not None
    token: str = sealer.csrf_token(session.session_id)
    return token


async def test_every_dashboard_page_and_action_for_every_principal(world: World) -> None:
    async def one(caller: Caller) -> list[str]:
        wrong = []
        async with httpx.AsyncClient(base_url=world.url) as http:
            csrf = None if caller.kind == "anonymous" else await sign_in(world, http, caller)
            may_sign_in = caller.kind in DECLARED["dashboard.use"][0] or caller.kubernetes
            if caller.kind != "anonymous" and (csrf is not None) != may_sign_in:
                return [f"signing in as {caller.name}: {csrf is not None}, not {may_sign_in}"]
            if caller.kind != "anonymous" and csrf is None:
                return []  # a worker or scraper token: it never gets a session
            for page in PAGES:
                if caller.grants == "exact":
                    world.cluster.exact = grants_of(page.operations)
                    world.clock.now += 100
                seen = await page.call(world, http, caller, csrf or "")
                want = expected_page(page, caller)
                if seen is not want:
                    wrong.append(
                        f"{page.method} {page.path} as {caller.name}: {seen.name}, not {want.name}"
                    )
        return wrong

    found = await asyncio.gather(*(one(caller) for caller in CALLERS))
    wrong = list(itertools.chain.from_iterable(found))
    assert not wrong, "\n".join(wrong)
    pages = sum(
        1 for c in CALLERS for _ in PAGES if c.kind in ("anonymous", "admin", "team", "kubernetes")
    )
    assert pages == 24 * 9  # the pages' matrix; worker and metrics tokens stop at the sign-in


def without_ids(response: httpx.Response, *run_ids: str) -> tuple[int, str]:
    text = response.text
    for run_id in run_ids:
        text = text.replace(run_id, "<run>")
    return response.status_code, text


async def test_a_caller_without_the_right_cannot_tell_a_run_that_exists(world: World) -> None:
    for name in (
        "worker of another queue",
        "worker of another tenant",
        "ServiceAccount without grants",
    ):
        await cannot_tell(world, name)


async def cannot_tell(world: World, name: str) -> None:
    [caller] = [c for c in CALLERS if c.name == name]
    held = await world.leased()
    shard, number = held.run_id.removeprefix("r").split("-")
    missing = f"r{shard}-{int(number) + 1000}"
    token = held.fencing_token
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/v1/runs/{}/heartbeat", {"fencingToken": token, "extendSeconds": 60}),
        ("POST", "/v1/runs/{}/complete", {"fencingToken": token, "outcome": "succeeded"}),
        ("GET", "/v1/runs/{}", None),
    ]
    async with httpx.AsyncClient(base_url=world.url, headers=world.headers(caller)) as http:
        for method, path, body in calls:
            answers = [
                without_ids(await http.request(method, path.format(run), json=body), run)
                for run in (held.run_id, missing)
            ]
            assert answers[0] == answers[1], (path, answers)
            assert answers[0][0] == 404, answers
        for path, extra in [
            ("/v1/runs:heartbeat", {"extendSeconds": 60}),
            ("/v1/runs:complete", {"outcome": "succeeded"}),
        ]:
            items = [
                {"runId": run, "fencingToken": token, **extra} for run in (held.run_id, missing)
            ]
            answer = await http.post(path, json={"items": items})
            assert answer.status_code == 200, answer.text
            first, second = answer.json()["items"]
            assert first["problem"]["status"] == 404
            assert without_ids(answer, held.run_id, missing)[1].count("<run>") == 4
            assert {**first, "runId": "-", "problem": {**first["problem"], "detail": "-"}} == {
                **second,
                "runId": "-",
                "problem": {**second["problem"], "detail": "-"},
            }
    assert await world.state(held.run_id) is State.leased  # nothing was done to it


BODILESS_REFUSALS = [
    ("metrics scraper", "POST", "/v1/lease"),
    ("team", "POST", "/v1/runs:heartbeat"),
    ("team", "POST", "/v1/runs:complete"),
    ("team", "POST", "/v1/runs/r0-1/heartbeat"),
    ("team", "POST", "/v1/runs/r0-1/complete"),
    ("worker", "PUT", "/v1/jobs/payroll"),
    ("worker", "POST", "/v1/jobs/payroll/runs"),
    ("worker", "POST", "/v1/jobs/payroll/runs:batch"),
    ("ServiceAccount without grants", "PUT", "/v1/jobs/payroll"),
    ("ServiceAccount without grants", "POST", "/v1/jobs/payroll/runs"),
    ("ServiceAccount without grants", "POST", "/v1/jobs/payroll/runs:batch"),
    ("team of another tenant", "POST", "/v1/jobs/payroll/runs?tenant=acme"),
]


async def test_a_caller_is_refused_before_its_body_is_read(world: World) -> None:
    for name, method, path in BODILESS_REFUSALS:
        [caller] = [c for c in CALLERS if c.name == name]
        async with httpx.AsyncClient(base_url=world.url, headers=world.headers(caller)) as http:
            # Not JSON at all: a route that parsed it first would answer 400.
            answer = await http.request(method, path, content=b'{"' + b"\\" * 1000)
        assert answer.status_code == 403, (name, method, path, answer.text)
        if caller.kind == "team" and "/v1/runs" in path:
            expected_detail = "runs.report needs a worker or admin token, not team"
            assert answer.json()["detail"] == expected_detail
