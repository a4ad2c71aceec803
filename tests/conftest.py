"""Test fixtures: a real PostgreSQL per test session, a migrated template database,
and a fresh clone of it per test.

Without ``TICKWORK_TEST_DATABASE_URL`` the pgserver wheel starts a private server in a
temporary directory; with it, tests use that server (they create and drop databases).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from kube.fixtures import kube  # noqa: F401  (the emulated Kubernetes API)
from pg_server import migrated_template, scratch_database, server

from tickwork.api.app import create_app
from tickwork.api.auth import Authenticator, Role, StaticTokens, TokenEntry
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.core.clock import FrozenClock
from tickwork.core.settings import ApiSettings, EdgeSettings
from tickwork.core.shards import ShardMap
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

TEST_SHARDS = 4
# One template per xdist worker: workers may share an external server.
TEMPLATE = "tickwork_template" + os.environ.get("PYTEST_XDIST_WORKER", "")


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    # A throwaway server: durability buys nothing here, and every test clones and drops
    # a database. Its WAL is kept small, as its files may be in memory (pg_server). The
    # fault tests that crash PostgreSQL run their own server.
    with server(
        "tickwork-test-pg-",
        "ALTER SYSTEM SET fsync = off; ALTER SYSTEM SET synchronous_commit = off; "
        "ALTER SYSTEM SET full_page_writes = off; ALTER SYSTEM SET max_wal_size = '512MB'; "
        "SELECT pg_reload_conf();",
    ) as url:
        yield url


@pytest.fixture(scope="session")
async def template_url(server_url: str) -> str:
    """A database with every test shard migrated, cloned by each test."""
    return await migrated_template(server_url, TEMPLATE, TEST_SHARDS)


@pytest.fixture
async def database_url(server_url: str, template_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, "tickwork_test", TEMPLATE) as url:
        yield url


@pytest.fixture
def shard_map(database_url: str) -> ShardMap:
    return ShardMap.from_dsns([database_url], TEST_SHARDS)


@pytest.fixture
async def database(shard_map: ShardMap) -> AsyncIterator[Database]:
    async with Database(shard_map) as db:
        yield db


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(datetime(2026, 3, 15, 1, 0, tzinfo=UTC))


ADMIN_TOKEN = "admin-token-0123456789"
TEAM_TOKEN = "team-acme-token-0123456789"
OTHER_TEAM_TOKEN = "team-globex-token-0123456789"
WORKER_TOKEN = "worker-acme-token-0123456789"
OTHER_WORKER_TOKEN = "worker-globex-token-0123456789"


def test_tokens() -> StaticTokens:
    return StaticTokens(
        [
            TokenEntry(token=ADMIN_TOKEN, tenant="ops", role=Role.admin, name="ops-admin"),
            TokenEntry(token=TEAM_TOKEN, tenant="acme", role=Role.team, name="acme-team"),
            TokenEntry(token=OTHER_TEAM_TOKEN, tenant="globex", role=Role.team),
            TokenEntry(
                token=WORKER_TOKEN,
                tenant="acme",
                role=Role.worker,
                queues=["default", "billing"],
                name="acme-worker",
            ),
            TokenEntry(
                token=OTHER_WORKER_TOKEN, tenant="globex", role=Role.worker, queues=["default"]
            ),
        ]
    )


@dataclass
class ApiServer:
    """The real app on a real PostgreSQL, served on 127.0.0.1."""

    url: str
    services: Services
    scheduler: Scheduler
    admin_token: str = ADMIN_TOKEN
    team_token: str = TEAM_TOKEN
    other_team_token: str = OTHER_TEAM_TOKEN
    worker_token: str = WORKER_TOKEN
    other_worker_token: str = OTHER_WORKER_TOKEN

    @property
    def jobs(self) -> Jobs:
        return self.services.jobs

    @property
    def database(self) -> Database:
        return self.services.engine.database

    def scheduler_at(self, instant: datetime) -> Scheduler:
        """A scheduler whose clock stands at ``instant``: its pass sees leases expired
        and retries due as of then, with no wait (the injected clock)."""
        return Scheduler(self.database, clock=FrozenClock(instant))

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def services_over(
    database: Database, authenticator: Authenticator | None = None, **settings: Any
) -> Services:
    """The API's services over ``database``: the test tokens unless told otherwise, and
    ``settings`` for ``ApiSettings``."""
    return Services(
        engine=Installation.over(database),
        authenticator=test_tokens() if authenticator is None else authenticator,
        metrics=Metrics(),
        settings=ApiSettings(**settings),
    )


@contextlib.asynccontextmanager
async def served(services: Services, limits: EdgeSettings | None = None) -> AsyncIterator[str]:
    """The app over ``services`` served on 127.0.0.1 (port 0): its URL, while it runs."""
    server = HttpServer(create_app(services), port=0, limits=limits)
    url = await server.start()
    try:
        yield url
    finally:
        await server.stop()


@pytest.fixture
async def api_server(database: Database) -> AsyncIterator[ApiServer]:
    """The API served over HTTP. ``api_server.scheduler.pass_once()`` runs one scheduler
    pass (due flip, reaper) on demand; no background loop runs unless a test starts one."""
    # Tests send unknown tokens by the hundred from one address; the throttle of failed
    # authentications has tests of its own (tests/api/test_throttle.py).
    services = services_over(database, auth_failure_rate=0)
    async with served(services) as url:
        yield ApiServer(url=url, services=services, scheduler=Scheduler(database))


# Loop iterations a test's own tasks get, once it and its fixtures are done, to finish
# what they already have to do (a cancellation, a closed connection's last callback).
SETTLE_ITERATIONS = 20


@pytest.fixture(autouse=True)
async def fail_on_leaked_tasks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fail a test that leaves tasks it started pending on the loop all tests share.

    Such a task keeps running into later tests (holding connections, writing rows,
    failing in someone else's test), and usually means the code under test does not
    stop what it starts. Autouse here, so set up before the test's other function
    fixtures and torn down after them: what they start and stop is not a leak, and the
    tasks of session and module fixtures, set up earlier, are not counted.
    """
    before = asyncio.all_tasks()
    yield
    if request.node.get_closest_marker("leaks_tasks"):
        return
    leaked: set[asyncio.Task[Any]] = set()
    for _ in range(SETTLE_ITERATIONS):
        leaked = asyncio.all_tasks() - before - {asyncio.current_task()}
        if not leaked:
            return
        await asyncio.sleep(0)
    shown = "\n  ".join(sorted(repr(task) for task in leaked))
    # Stopped here so that they cannot fail or block the next test on this loop.
    for task in leaked:
        task.cancel()
    await asyncio.wait(leaked, timeout=5)
    pytest.fail(f"the test left {len(leaked)} task(s) pending:\n  {shown}", pytrace=False)
