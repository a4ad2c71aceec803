"""One contract suite, two backends: every test here that takes ``leases`` runs once on
PostgreSQL (each shard's lease and members in its own schema) and once on the emulated
Kubernetes API (a Lease object per shard and per member, real 409s on stale writes).

``leases.replica()`` makes a new, independent backend instance, as another scheduler
replica would have (its own Kubernetes client and Lease cache). Lease time is the
shared ``FrozenClock``: the postgres backend judges expiry on the pinned instant, the
kubernetes backend writes and reads ``renewTime`` with it, so tests move time instead
of sleeping through a lease.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes_asyncio
import pytest
from kube import emulator
from pg_server import migrated_template, scratch_database

from tickwork.coordination.backend import Backend
from tickwork.coordination.kubernetes import KubernetesLeases
from tickwork.coordination.postgres import PostgresLeases
from tickwork.core.clock import FrozenClock
from tickwork.core.shards import ShardMap
from tickwork.store.database import Database

SHARDS = 8
NAMESPACE = "tickwork"
# One template per xdist worker, as tests/conftest.py does.
TEMPLATE = "tickwork_coordination_template" + os.environ.get("PYTEST_XDIST_WORKER", "")


@dataclass
class Leases:
    """The backend under test, and a way to make more replicas of it."""

    kind: str
    clock: FrozenClock
    shard_count: int
    database: Database | None = None
    kube: emulator.Emulator | None = None
    made: list[Backend] = field(default_factory=list)
    clients: list[Any] = field(default_factory=list)

    async def replica(self) -> Backend:
        backend: Backend
        if self.kind == "postgres":
            assert self.database is not None
            backend = PostgresLeases(self.database, clock=self.clock, shard_seconds=5)
        else:
            assert self.kube is not None and self.kube.kubeconfig is not None
            api = await kubernetes_asyncio.config.new_client_from_config(
                config_file=str(self.kube.kubeconfig)
            )
            self.clients.append(api)
            backend = KubernetesLeases(api, NAMESPACE, self.shard_count, clock=self.clock)
        self.made.append(backend)
        return backend

    async def close(self) -> None:
        for backend in self.made:
            await backend.close()
        for api in self.clients:
            await api.close()


@pytest.fixture(scope="session")
async def coordination_template(server_url: str, template_url: str) -> str:
    """A database with ``SHARDS`` migrated shards (the suite's other tests use 4)."""
    await migrated_template(server_url, TEMPLATE, SHARDS)
    return TEMPLATE


@pytest.fixture
async def eight_shard_url(server_url: str, coordination_template: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, "tickwork_coord", coordination_template) as url:
        yield url


@pytest.fixture
async def eight_shards(eight_shard_url: str) -> AsyncIterator[Database]:
    async with Database(ShardMap.from_dsns([eight_shard_url], SHARDS)) as database:
        yield database


@pytest.fixture(params=["postgres", "kubernetes"])
async def leases(
    request: pytest.FixtureRequest, eight_shards: Database, kube: emulator.Emulator
) -> AsyncIterator[Leases]:
    clock = FrozenClock(datetime.now(UTC))
    if request.param == "postgres":
        made = Leases("postgres", clock, SHARDS, database=eight_shards)
    else:
        await kube.create_namespace(NAMESPACE)
        made = Leases("kubernetes", clock, SHARDS, kube=kube)
    try:
        yield made
    finally:
        await made.close()
