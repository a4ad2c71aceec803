"""Fixtures of the fault-injection tests: a private PostgreSQL they may stop, a migrated
database on it per test, TCP proxies in front of it, and the roles wired to them.

Waits poll the database (or a role's state) at short intervals up to a deadline: no
test sleeps through an outage it could observe.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import asyncpg
import pytest
from conftest import scratch_database, test_tokens

from faults.postgres import PostgresProcess
from faults.proxy import TcpProxy
from tickwork.api.app import create_app
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.core.clock import DatabaseClock
from tickwork.core.settings import ApiSettings
from tickwork.core.shards import ShardMap
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import Metrics
from tickwork.store import migrate
from tickwork.store.database import Database, PoolSettings
from tickwork.store.wakeup import ReadySignal

SHARDS = 4
TEMPLATE = "tickwork_faults_template"
# Tight bounds, so a hung link shows within a fraction of a second.
FAST_POOLS = PoolSettings(command_timeout=0.5, acquire_timeout=0.5, connect_timeout=0.5)


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    within: float = 10.0,
    every: float = 0.02,
    what: str = "the condition",
) -> float:
    """Poll ``check`` until it is true; return the seconds it took. Fails after
    ``within`` seconds."""
    started = time.monotonic()
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() - started > within:
            pytest.fail(f"{what} did not happen within {within}s")
        await asyncio.sleep(every)


@pytest.fixture(scope="package")
def postgres() -> Iterator[PostgresProcess]:
    server = PostgresProcess().init()
    server.start()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="package")
async def faults_template(postgres: PostgresProcess) -> str:
    admin = await asyncpg.connect(postgres.url)
    try:
        await admin.execute(f'CREATE DATABASE "{TEMPLATE}"')
    finally:
        await admin.close()
    url = postgres.url.rsplit("/", 1)[0] + "/" + TEMPLATE
    await migrate.migrate_all(ShardMap.from_dsns([url], SHARDS).shards)
    return TEMPLATE


@pytest.fixture
async def fault_url(postgres: PostgresProcess, faults_template: str) -> AsyncIterator[str]:
    """A freshly migrated database on the private server, running at the start of the
    test (a test that stopped it gets it started again)."""
    if not postgres.running:
        postgres.start()
    async with scratch_database(postgres.url, "tickwork_faults", faults_template) as url:
        try:
            yield url
        finally:
            if not postgres.running:  # the test stopped it and failed before restarting
                postgres.start()


@pytest.fixture
async def proxies(postgres: PostgresProcess) -> AsyncIterator[list[TcpProxy]]:
    """One proxy per shard, each a link of its own to the private server."""
    started = [await TcpProxy("127.0.0.1", postgres.port).start() for _ in range(SHARDS)]
    try:
        yield started
    finally:
        for proxy in started:
            await proxy.close()


def proxied_map(url: str, proxies: list[TcpProxy]) -> ShardMap:
    """Every shard of the database at ``url``, each through its own proxy."""
    return ShardMap.from_dsns([proxy.dsn(url) for proxy in proxies])


@dataclass
class Api:
    url: str
    services: Services
    server: HttpServer
    metrics: Metrics = field(default_factory=Metrics)


@contextlib.asynccontextmanager
async def serving(
    shard_map: ShardMap,
    pools: PoolSettings = FAST_POOLS,
    settings: ApiSettings | None = None,
) -> AsyncIterator[Api]:
    """The API on ``shard_map`` served on 127.0.0.1, with test tokens."""
    async with Database(shard_map, pools) as database:
        metrics = Metrics()
        wakeups = ReadySignal(database.shard_map, reconnect_delay=0.05, probe_interval=0.5)
        engine = Installation(
            database=database,
            jobs=Jobs(database),
            dispatcher=Dispatcher(database, wakeups=wakeups),
            clock=DatabaseClock(),
        )
        services = Services(
            engine=engine,
            authenticator=test_tokens(),
            metrics=metrics,
            settings=settings or ApiSettings(),
        )
        server = HttpServer(create_app(services), port=0)
        url = await server.start()
        try:
            yield Api(url, services, server, metrics)
        finally:
            await server.stop()


# Two shards, each the only shard of its own database (production's layout: one URL per
# shard), migrated once per run of the package and cloned per test.
SEPARATE_TEMPLATES = ("tickwork_faults_shard0_template", "tickwork_faults_shard1_template")


@pytest.fixture(scope="package")
async def separate_templates(postgres: PostgresProcess) -> tuple[str, ...]:
    admin = await asyncpg.connect(postgres.url)
    try:
        for name in SEPARATE_TEMPLATES:
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base = postgres.url.rsplit("/", 1)[0]
    await migrate.migrate_all(
        ShardMap.from_dsns([f"{base}/{n}" for n in SEPARATE_TEMPLATES]).shards
    )
    return SEPARATE_TEMPLATES


@pytest.fixture
async def separate_urls(
    postgres: PostgresProcess, separate_templates: tuple[str, ...]
) -> AsyncIterator[list[str]]:
    """Shard 0 and shard 1 in two databases of their own, freshly cloned."""
    if not postgres.running:
        postgres.start()
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                scratch_database(postgres.url, f"tickwork_faults_shard{n}", template)
            )
            for n, template in enumerate(separate_templates)
        ]
