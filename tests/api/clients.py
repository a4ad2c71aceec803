"""What the API's tests share: clients of the served API (``conftest.ApiServer``), the
calls most tests make through them, the checks of what the API answers, and a clock
for the caches and rate limits the API reads time from.

Imported as ``from api.clients import ...``: ``tests`` is on ``sys.path``, and the
package name keeps it apart from the root ``conftest`` the tests import by name."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import pytest
from conftest import ApiServer
from pydantic import BaseModel

from tickwork.api import models
from tickwork.store.wakeup import ReadySignal, Waiter

PROBLEMS = "https://tickwork.dev/problems/"
# One TLS context for every client: httpx would load the CA bundle per client otherwise.
TLS = ssl.create_default_context()


class HandClock:
    """A monotonic clock (read by calling it) that moves only when a test moves it."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def client(api_server: ApiServer, token: str | None = None, **options: Any) -> httpx.AsyncClient:
    """A client of ``api_server`` with ``token`` (anonymous without one)."""
    headers = {} if token is None else api_server.headers(token)
    return httpx.AsyncClient(base_url=api_server.url, headers=headers, verify=TLS, **options)


def instant(text: str) -> datetime:
    assert text.endswith("Z"), f"{text} is not a UTC instant with Z"
    return datetime.fromisoformat(text)


def wire_fields(model: type[BaseModel], *, optional: bool = False) -> set[str]:
    """The JSON names of the fields an answer documented by ``model`` always holds (with
    ``optional``, may hold): the API leaves out a field with a default when it has no
    value (see api/models.py)."""
    return {
        info.alias or name
        for name, info in model.model_fields.items()
        if optional or info.is_required()
    }


def assert_problem(
    response: httpx.Response, status: int, slug: str, field: str | None = None
) -> dict[str, Any]:
    """``response`` is the RFC 9457 problem ``slug`` with ``status`` (naming ``field``,
    if given)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == PROBLEMS + slug, problem
    assert problem["status"] == status
    assert isinstance(problem["title"], str) and problem["title"]
    assert isinstance(problem["detail"], str) and problem["detail"]
    assert set(problem) <= wire_fields(models.Problem, optional=True), problem
    if field is not None:
        assert problem.get("field") == field, problem
    return problem


async def make_job(api_server: ApiServer, name: str, **spec: Any) -> dict[str, Any]:
    """Create job ``name`` of the team's tenant in queue default (unless ``spec`` says)."""
    async with client(api_server, api_server.team_token) as team:
        response = await team.put(f"/v1/jobs/{name}", json={"queue": "default"} | spec)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


async def enqueue(api_server: ApiServer, name: str, **body: Any) -> dict[str, Any]:
    async with client(api_server, api_server.team_token) as team:
        response = await team.post(f"/v1/jobs/{name}/runs", json=body)
    assert response.status_code == 201, response.text
    run: dict[str, Any] = response.json()
    return run


async def get_run(api_server: ApiServer, run_id: str) -> dict[str, Any]:
    async with client(api_server, api_server.team_token) as team:
        response = await team.get(f"/v1/runs/{run_id}")
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    return run


async def lease(api_server: ApiServer, **body: Any) -> list[dict[str, Any]]:
    """The worker's lease of queue default (unless ``body`` says), as answered."""
    async with client(api_server, api_server.worker_token) as worker:
        response = await worker.post("/v1/lease", json={"queues": ["default"]} | body)
    assert response.status_code == 200, response.text
    leases: list[dict[str, Any]] = response.json()["leases"]
    return leases


async def complete(
    api_server: ApiServer, granted: dict[str, Any], outcome: str = "succeeded", **extra: Any
) -> httpx.Response:
    async with client(api_server, api_server.worker_token) as worker:
        return await worker.post(
            f"/v1/runs/{granted['runId']}/complete",
            json={"fencingToken": granted["fencingToken"], "outcome": outcome} | extra,
        )


async def heartbeat(
    api_server: ApiServer, run_id: str, token: int, extend: float = 30
) -> httpx.Response:
    async with client(api_server, api_server.worker_token) as worker:
        return await worker.post(
            f"/v1/runs/{run_id}/heartbeat", json={"fencingToken": token, "extendSeconds": extend}
        )


@dataclass
class Waiting:
    """A long-poll's waiter, and each of its waits as it ended: the seconds it was
    given, and whether a wake-up ended it (False: it ran out, as a recheck does)."""

    waiter: Waiter
    waits: list[tuple[float, bool]] = field(default_factory=list)
    began: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self, seconds: float) -> bool:
        self.began.set()
        woken = await Waiter.wait(self.waiter, seconds)
        self.waits.append((seconds, woken))
        return woken

    async def asleep(self, within: float = 10) -> None:
        """Until the long-poll waits: its first look found nothing."""
        await asyncio.wait_for(self.began.wait(), within)

    @property
    def wakes(self) -> list[bool]:
        """Of each wait, whether a wake-up ended it."""
        return [woken for _, woken in self.waits]


def spy_on_waiters(signal: ReadySignal, monkeypatch: pytest.MonkeyPatch) -> asyncio.Queue[Waiting]:
    """Every long-poll that starts waiting on ``signal`` puts its waiter here, watched."""
    original = signal.waiter
    started: asyncio.Queue[Waiting] = asyncio.Queue()

    @contextlib.asynccontextmanager
    async def spied(queues: Iterable[str]) -> AsyncIterator[Waiter]:
        async with original(queues) as waiter:
            watched = Waiting(waiter)
            monkeypatch.setattr(waiter, "wait", watched.wait)
            started.put_nowait(watched)
            yield waiter

    monkeypatch.setattr(signal, "waiter", spied)
    return started


async def long_poll(
    worker: httpx.AsyncClient, waiting: asyncio.Queue[Waiting], **body: Any
) -> tuple[asyncio.Task[httpx.Response], Waiting]:
    """A lease that waits (``body``: its queues, waitSeconds, ...), once it is asleep:
    its answer to come, and its waits as they end."""
    polling = asyncio.create_task(worker.post("/v1/lease", json=body))
    watched = await asyncio.wait_for(waiting.get(), 10)
    await watched.asleep()
    return polling, watched
