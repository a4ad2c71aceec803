"""Test fixtures: a real PostgreSQL per test session, a migrated template database,
and a fresh clone of it per test.

Without ``TICKWORK_TEST_DATABASE_URL`` the pgserver wheel starts a private server in a
temporary directory; with it, tests use that server (they create and drop databases).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from kube.fixtures import kube  # noqa: F401  (the emulated Kubernetes API)

from tickwork.api.app import create_app
from tickwork.api.auth import Role, StaticTokens, TokenEntry
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.core.clock import FrozenClock
from tickwork.core.settings import ApiSettings, EdgeSettings
from tickwork.core.shards import ShardMap
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.store import migrate
from tickwork.store.database import Database

TEST_SHARDS = 4
# One template per xdist worker: workers may share an external server.
TEMPLATE = "tickwork_template" + os.environ.get("PYTEST_XDIST_WORKER", "")
_names = itertools.count()


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (keeps host, socket and credentials)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    external = os.environ.get("TICKWORK_TEST_DATABASE_URL")
    if external:
        yield external
        return
    import pgserver

    folder = tempfile.mkdtemp(prefix="tickwork-test-pg-")
    server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        # A throwaway server: durability buys nothing here, and every test clones and
        # drops a database. The fault tests that crash PostgreSQL run their own server.
        server.psql(
            "ALTER SYSTEM SET fsync = off; ALTER SYSTEM SET synchronous_commit = off; "
            "ALTER SYSTEM SET full_page_writes = off; SELECT pg_reload_conf();"
        )
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
async def template_url(server_url: str) -> str:
    """A database with every test shard migrated, cloned by each test."""
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}"')
        await admin.execute(f'CREATE DATABASE "{TEMPLATE}"')
    finally:
        await admin.close()
    url = with_database(server_url, TEMPLATE)
    await migrate.migrate_all(ShardMap.from_dsns([url], TEST_SHARDS).shards)
    return url


@contextlib.asynccontextmanager
async def scratch_database(
    server_url: str, prefix: str, template: str | None = None
) -> AsyncIterator[str]:
    """A new database (empty, or a clone of ``template``), dropped afterwards."""
    name = f"{prefix}_{os.getpid()}_{next(_names)}"
    clone = f' TEMPLATE "{template}"' if template else ""
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"{clone}')
    finally:
        await admin.close()
    try:
        yield with_database(server_url, name)
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


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
    services = Services(
        engine=Installation.over(database),
        authenticator=test_tokens(),
        metrics=Metrics(),
        # Tests send unknown tokens by the hundred from one address; the throttle of
        # failed authentications has tests of its own (tests/api/test_throttle.py).
        settings=ApiSettings(auth_failure_rate=0),
    )
    server = HttpServer(create_app(services), port=0)
    url = await server.start()
    try:
        yield ApiServer(url=url, services=services, scheduler=Scheduler(database))
    finally:
        await server.stop()


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
