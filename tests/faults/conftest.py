"""Fixtures of the fault-injection tests: a private PostgreSQL they may stop, a migrated
database on it per test, TCP proxies in front of it, and the roles wired to them.

Waits poll the database (or a role's state) at short intervals up to a deadline
(``polling.eventually``): no test sleeps through an outage it could observe.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import asyncpg
import pytest
from conftest import scratch_database, served, test_tokens
from kube import emulator
from scheduledjobs.conftest import quick

from faults.postgres import PostgresProcess
from faults.proxy import TcpProxy
from tickwork.api.services import Services
from tickwork.cli.probes import Probes
from tickwork.coordination import choice
from tickwork.coordination.coordinator import Timing
from tickwork.core.clock import DatabaseClock
from tickwork.core.settings import ApiSettings, OperatorSettings, SchedulerSettings, WebhookSettings
from tickwork.core.shards import ShardMap
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.operator import crd
from tickwork.operator.cluster import Cluster
from tickwork.operator.runtime import Operator
from tickwork.store import migrate
from tickwork.store.database import Database, PoolSettings
from tickwork.store.wakeup import ReadySignal

SHARDS = 4
TEMPLATE = "tickwork_faults_template"
# Tight bounds, so a hung link shows within a fraction of a second.
FAST_POOLS = PoolSettings(command_timeout=0.5, acquire_timeout=0.5, connect_timeout=0.5)


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
        async with served(services) as url:
            yield Api(url, services, metrics)


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


@contextlib.asynccontextmanager
async def running(scheduler: Scheduler) -> AsyncIterator[asyncio.Task[None]]:
    """``scheduler``'s loops while the block runs: the task, stopped at its end."""
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def failures(scheduler: Scheduler, kind: str = "outage") -> float:
    """The passes over a shard that failed so far, of ``kind`` (outage or error)."""
    assert scheduler.metrics is not None
    return scheduler.metrics.scheduler_errors.labels(kind)._value.get()


@contextlib.asynccontextmanager
async def scheduling(
    database: Database, kind: choice.Kind = "postgres", identity: str = "solo"
) -> AsyncIterator[tuple[Scheduler, Probes]]:
    """``tickwork scheduler --coordination KIND --lease-seconds 2``, passing every 0.1 s,
    with its probes."""
    async with choice.coordinator(
        database, kind=kind, identity=identity, timing=Timing(lease_seconds=2)
    ) as coordinator:
        scheduler = Scheduler(
            database,
            SchedulerSettings(interval=0.1, retry_base_seconds=0.05, retry_max_seconds=0.2),
            ownership=coordinator,
            metrics=Metrics(),
        )
        probes = Probes(scheduler, coordinator, "127.0.0.1", 0)
        await probes.start()
        try:
            async with running(scheduler):
                yield scheduler, probes
        finally:
            await probes.stop()


@contextlib.asynccontextmanager
async def operating(database: Database, kube: emulator.Emulator) -> AsyncIterator[Operator]:
    """``tickwork operator`` over ``database`` for the namespace ``default`` of the
    emulated API, once it is ready."""
    await kube.create(crd.definition())
    settings = OperatorSettings(
        namespaces=("default",),
        webhook=WebhookSettings(port=0),
        status_interval=0.2,
        health_port=0,
        health_bind="127.0.0.1",
        store_retry_seconds=0.2,
    )
    assert kube.kubeconfig is not None
    cluster = await Cluster.connect(str(kube.kubeconfig))
    try:
        operator = Operator(Jobs(database), cluster, settings, tune=quick)
        stop = asyncio.Event()
        task = asyncio.create_task(operator.run(stop))
        try:
            await asyncio.wait_for(operator.ready.wait(), 15)
            yield operator
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)
    finally:
        await cluster.close()
