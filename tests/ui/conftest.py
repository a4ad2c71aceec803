"""The dashboard served by the real app on a real PostgreSQL, and helpers to sign in
and to make jobs and runs through the engine."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from conftest import ApiServer, services_over
from fastapi import FastAPI

from tickwork.api.app import create_app
from tickwork.api.server import HttpServer
from tickwork.core.records import Outcome, Run
from tickwork.core.spec import JobSpec
from tickwork.engine.dispatch import CompleteItem
from tickwork.engine.jobs import EnqueueRequest
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

POLL_SECONDS = 0.2
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class UiServer(ApiServer):
    app: FastAPI | None = None


@pytest.fixture
async def dashboard(database: Database) -> AsyncIterator[UiServer]:
    """The API with the dashboard, refreshing open pages every 0.2 s."""
    services = services_over(
        database, ui_poll_seconds=POLL_SECONDS, ui_secret="test-secret-" + "x" * 32
    )
    app = create_app(services)
    server = HttpServer(app, port=0)
    url = await server.start()
    try:
        yield UiServer(url=url, services=services, scheduler=Scheduler(database), app=app)
    finally:
        await server.stop()


def shown(page: str, term: str) -> str:
    """The text a page gives for ``term`` in a definition list, tags stripped."""
    found = re.search(rf"<dt>{term}</dt><dd[^>]*>(.*?)</dd>", page, re.S)
    assert found is not None, page
    return re.sub(r"<[^>]+>", "", found.group(1))


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "no CSRF field on the page"
    return found.group(1)


@contextlib.asynccontextmanager
async def signed_in(server: ApiServer, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client holding a dashboard session for ``token``."""
    async with httpx.AsyncClient(base_url=server.url) as client:
        form = await client.get("/ui/login")
        assert form.status_code == 200
        answer = await client.post(
            "/ui/login", data={"token": token, "csrf": csrf_of(form.text), "next": "/ui/"}
        )
        assert answer.status_code == 303, answer.text
        yield client


async def make_job(server: ApiServer, tenant: str, name: str, **spec: Any) -> None:
    document = {"queue": "default", "retry": {"maxAttempts": 1}} | spec
    await server.jobs.put(tenant, name, JobSpec.model_validate(document), "test")


async def enqueue(server: ApiServer, tenant: str, name: str, payload: Any = None) -> Run:
    run, _ = await server.jobs.enqueue(
        tenant,
        name,
        EnqueueRequest(payload=payload, payload_given=payload is not None),
        "test",
    )
    return run


async def lease_one(server: ApiServer, tenant: str, queue: str = "default") -> Any:
    leases = await server.services.dispatcher.lease(
        [queue], limit=1, worker_id="worker-7", lease_seconds=30, tenant=tenant
    )
    assert len(leases) == 1
    return leases[0]


async def finish(server: ApiServer, lease: Any, error: dict[str, Any] | None = None) -> None:
    outcome = Outcome.succeeded if error is None else Outcome.failed
    item = CompleteItem(lease.run_id, lease.fencing_token, outcome, error, retryable=False)
    (result,) = await server.services.dispatcher.complete([item])
    assert not isinstance(result, Exception), result


async def dead_run(server: ApiServer, tenant: str, name: str, message: str = "boom") -> Run:
    """A run of ``tenant/name`` (a job made with one attempt) that ended in the DLQ."""
    await enqueue(server, tenant, name)
    lease = await lease_one(server, tenant)
    await finish(server, lease, {"message": message})
    run, _ = await server.jobs.run(lease.run_id)
    return run
