"""A client that goes away before its request is read is not a server error: no ERROR
line, no traceback, one INFO line (``client-gone``), and the server answers on.

Each such client used to leave two tracebacks at ERROR (``internal-error`` from the
server-error handler, and uvicorn's "Exception in ASGI application"): 302 in one probe
run, none of them a fault of the server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import conftest
import httpx
import pytest
from conftest import TEAM_TOKEN, WORKER_TOKEN, ApiServer
from conftest import test_tokens as tokens
from polling import eventually

from api.clients import TLS
from tickwork.api.auth import Principal
from tickwork.api.services import Services
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database


def request_head(path: str, token: str, length: int, method: str = "POST") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: tickwork\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def send_and_close(url: str, data: bytes) -> None:
    """Send ``data`` on a new connection and close it without reading an answer."""
    address = httpx.URL(url)
    assert address.host and address.port
    _reader, writer = await asyncio.open_connection(address.host, address.port)
    writer.write(data)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


def gone(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == "client-gone"]


def assert_no_errors(caplog: pytest.LogCaptureFixture) -> None:
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert all(r.exc_info is None for r in gone(caplog))
    assert all(r.levelno == logging.INFO for r in gone(caplog))


async def assert_still_serving(url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, verify=TLS) as caller:
        assert (await caller.get("/healthz")).status_code == 200
        assert (await caller.put("/v1/jobs/after", json={})).status_code == 201


async def test_a_client_that_closes_in_the_middle_of_its_body_is_not_an_error(
    api_server: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    halves = [
        # A worker's call (served by the fast path) and a team's (through FastAPI).
        request_head("/v1/runs:heartbeat", api_server.worker_token, 100) + b'{"items": [',
        request_head("/v1/jobs/half", api_server.team_token, 100, "PUT") + b'{"queue"',
        request_head("/v1/jobs/half/runs", api_server.team_token, 100),
    ]
    for data in halves:
        await send_and_close(api_server.url, data)
    await eventually(lambda: len(gone(caplog)) >= len(halves), what="a client-gone record each")
    assert_no_errors(caplog)
    assert {r.getMessage().partition(": the client")[0] for r in gone(caplog)} == {
        "POST /v1/runs:heartbeat",
        "PUT /v1/jobs/half",
        "POST /v1/jobs/half/runs",
    }
    await assert_still_serving(api_server.url, api_server.team_token)


class SlowTokens:
    """The test tokens, known only after a pause (as a Kubernetes TokenReview is)."""

    def __init__(self, seconds: float) -> None:
        self.tokens = tokens()
        self.seconds = seconds

    async def authenticate(self, token: str) -> Principal | None:
        await asyncio.sleep(self.seconds)
        return await self.tokens.authenticate(token)


@asynccontextmanager
async def slow_to_authenticate(database: Database) -> AsyncIterator[str]:
    services = Services(
        engine=Installation.over(database), authenticator=SlowTokens(0.2), metrics=Metrics()
    )
    async with conftest.served(services) as url:
        yield url


async def test_a_client_that_closes_while_waiting_for_its_answer_is_not_an_error(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    whole = [
        request_head("/v1/runs:heartbeat", WORKER_TOKEN, 13) + b'{"items": []}',
        request_head("/v1/jobs/waited", TEAM_TOKEN, 2, "PUT") + b"{}",
    ]
    async with slow_to_authenticate(database) as url:
        for data in whole:
            # Sent whole; gone while the server still authenticates the caller.
            await send_and_close(url, data)
        await eventually(lambda: len(gone(caplog)) >= len(whole), what="a client-gone record each")
        assert_no_errors(caplog)
        await assert_still_serving(url, TEAM_TOKEN)
