"""``/readyz`` answers without a token, so it says what is wrong with a shard but not
where the shard lives: no host, port, user, schema or error text. The server logs those
for its operators."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import conftest
import httpx
import pytest
from conftest import test_tokens as tokens

from api.clients import TLS
from tickwork.api.services import Services
from tickwork.core.shards import Shard, ShardMap
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

PASSWORD = "hunter2-readyz"


def closed_port() -> int:
    """A port of this host nothing listens on (a refused connection, at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@asynccontextmanager
async def served(shard_map: ShardMap) -> AsyncIterator[str]:
    async with Database(shard_map) as database:
        services = Services(
            engine=Installation.over(database), authenticator=tokens(), metrics=Metrics()
        )
        async with conftest.served(services) as url:
            yield url


def not_ready(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == "shard-not-ready"]


async def test_an_unreachable_shard_is_named_without_its_address(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tickwork")
    port = closed_port()
    elsewhere = f"postgresql://tickwork:{PASSWORD}@127.0.0.1:{port}/tickwork"
    shards = ShardMap(tuple(Shard(n, elsewhere if n == 1 else database_url) for n in range(4)))
    async with served(shards) as url, httpx.AsyncClient(base_url=url, verify=TLS) as anyone:
        response = await anyone.get("/readyz")
    # The other shards serve: ready, and degraded.
    assert response.status_code == 200
    assert response.json() == {
        "status": "degraded",
        "shards": 4,
        "problems": ["shard 1: unreachable"],
        "down": [1],
    }
    for secret in (str(port), "127.0.0.1", PASSWORD, "tickwork:", "Errno", "Connect"):
        assert secret not in response.text
    # The operator reading the log learns where and why.
    [record] = not_ready(caplog)
    assert record.levelno == logging.WARNING
    assert getattr(record, "shard", None) == 1
    assert str(port) in record.getMessage()
    assert "ConnectionRefusedError" in record.getMessage()


async def test_a_shard_holding_another_shard_is_named_without_its_dsn(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The test database holds 4 shards: read as 2, each schema holds another shard.
    caplog.set_level(logging.WARNING, logger="tickwork")
    host = httpx.URL(database_url).host
    shards = ShardMap.from_dsns([database_url], 2)
    async with served(shards) as url, httpx.AsyncClient(base_url=url, verify=TLS) as anyone:
        response = await anyone.get("/readyz")
    assert response.status_code == 503
    assert response.json()["problems"] == [
        "shard 0: should hold shard 0 of 2 but holds shard 0 of 4",
        "shard 1: should hold shard 1 of 2 but holds shard 1 of 4",
    ]
    for secret in ("tickwork_shard_", "postgres", "://", *([host] if host else [])):
        assert secret not in response.text
    records = not_ready(caplog)
    assert [getattr(r, "shard", None) for r in records] == [0, 1]
    assert all("schema tickwork_shard_" in r.getMessage() for r in records)
