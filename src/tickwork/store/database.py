"""Connection pools, one per shard, each bound to its shard's schema (bounded as
``PoolSettings`` says). A pool opens no connection to a shard this code does not serve
now (``compatibility``): its callers see that shard as unreachable until it is
migrated."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar, Final, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tickwork.core.settings import PoolSettings
from tickwork.core.shards import Shard, ShardMap
from tickwork.store import compatibility, outages

# Store functions accept a plain connection or one checked out of a pool.
Connection: TypeAlias = asyncpg.Connection | PoolConnectionProxy


_DEFAULT_POOL: Final = PoolSettings()


# The server ends a session left idle inside a transaction (its client partitioned or
# hung mid-transaction), so the rows it locked do not stay locked until TCP gives up.
IDLE_IN_TRANSACTION_TIMEOUT: Final = "60s"


def application_name(shard: int) -> str:
    """The ``application_name`` of the roles' sessions on ``shard``."""
    return f"tickwork-shard-{shard}"


def server_settings(shard: Shard, name: str | None = None) -> dict[str, str]:
    """Session settings of every connection to ``shard``: its schema comes first."""
    return {
        "search_path": shard.schema,
        "application_name": name or application_name(shard.number),
        "idle_in_transaction_session_timeout": IDLE_IN_TRANSACTION_TIMEOUT,
        # Short statements only: compiling one (the claim) took longer than running it.
        "jit": "off",
    }


class ClaimConnection(asyncpg.Connection):  # type: ignore[misc]
    """A connection that plans every statement once, generically
    (``plan_cache_mode = force_generic_plan`` for the session), for the claim.

    The claim's plan is the same for every argument (index scans throughout), but
    PostgreSQL kept planning it anew: 2-7 ms each time against under a millisecond to
    run it. Setting the mode for the session, not per transaction, makes a claim one
    statement and one round trip. Only claims use these connections: other statements
    (optional filters, cursors) do better with plans made for their arguments.
    """

    generic_plans: ClassVar[bool] = True


def claim_settings(shard: Shard) -> dict[str, str]:
    return {
        **server_settings(shard),
        "plan_cache_mode": "force_generic_plan",
        # A generic plan guesses thousands of heads, and a hashed aggregate builds its
        # table for that guess when the executor starts, before a row has come: that set-up
        # was a fifth of a claim. The claim groups a few dozen rows at most, which a
        # sort does for nothing.
        "enable_hashagg": "off",
    }


async def connect(
    shard: Shard,
    connect_timeout: float = _DEFAULT_POOL.connect_timeout,
    *,
    name: str | None = None,
    claims: bool = False,
) -> asyncpg.Connection:
    """A single connection to ``shard`` (for migrations, listeners, maintenance and
    tests); ``name`` its ``application_name`` when not a role's; with ``claims``, a
    ``ClaimConnection``."""
    if claims:
        connection: asyncpg.Connection = await asyncpg.connect(
            shard.dsn,
            server_settings=claim_settings(shard),
            timeout=connect_timeout,
            connection_class=ClaimConnection,
        )
        return connection
    return await asyncpg.connect(
        shard.dsn, server_settings=server_settings(shard, name), timeout=connect_timeout
    )


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """What a pooled connection gets before its next use: nothing more than asyncpg's
    own cleanup (an open transaction rolled back, listeners dropped). Every setting our
    statements make is LOCAL, and none LISTENs or takes a session-level lock on a pooled
    connection, so the default RESET ALL, UNLISTEN and CLOSE ALL would find nothing to
    undo, at the cost of a round trip at the end of every use."""


async def _serves(conn: asyncpg.Connection, shard: Shard, shard_count: int) -> None:
    """Refuse a new pooled connection to a shard this code does not serve now (behind
    its schema, another shard, a reshard half done): ``compatibility``."""
    from tickwork.store import migrate  # it imports this module

    await compatibility.admit(conn, shard, shard_count, migrate.latest_version())


class Database:
    """Pools for every shard of a ``ShardMap``; use as an async context manager."""

    def __init__(self, shard_map: ShardMap, settings: PoolSettings | None = None) -> None:
        self.shard_map = shard_map
        self.settings = settings or PoolSettings()
        self._pools: list[asyncpg.Pool] = []
        # Claims have pools of their own: see ClaimConnection.
        self._claim_pools: list[asyncpg.Pool] = []

    async def open(self) -> None:
        settings = self.settings

        def pool(shard: Shard, claims: bool) -> asyncpg.Pool:
            return asyncpg.create_pool(
                shard.dsn,
                server_settings=claim_settings(shard) if claims else server_settings(shard),
                connection_class=ClaimConnection if claims else asyncpg.Connection,
                min_size=settings.min_size,
                max_size=settings.max_size,
                command_timeout=settings.command_timeout,
                timeout=settings.connect_timeout,
                reset=_keep_session,
                init=functools.partial(_serves, shard=shard, shard_count=self.shard_map.count),
            )

        shards = self.shard_map.shards
        pools = await asyncio.gather(
            *(pool(shard, False) for shard in shards), *(pool(shard, True) for shard in shards)
        )
        self._pools = list(pools[: len(shards)])
        self._claim_pools = list(pools[len(shards) :])

    async def close(self) -> None:
        """Close every pool gracefully, or, when a shard does not answer within the
        statement timeout (a hung link), drop its connections."""
        pools = self._pools + self._claim_pools
        self._pools, self._claim_pools = [], []

        async def close(pool: asyncpg.Pool) -> None:
            try:
                await asyncio.wait_for(pool.close(), self.settings.command_timeout)
            except Exception as error:
                if not outages.is_outage(error):
                    raise
                pool.terminate()

        await asyncio.gather(*(close(pool) for pool in pools))

    async def __aenter__(self) -> Database:
        await self.open()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    @property
    def shard_count(self) -> int:
        return self.shard_map.count

    @asynccontextmanager
    async def connection(self, shard: int) -> AsyncIterator[Connection]:
        timeout = self.settings.acquire_timeout
        async with self._pools[shard].acquire(timeout=timeout) as conn:
            yield conn

    @asynccontextmanager
    async def claim_connection(self, shard: int) -> AsyncIterator[Connection]:
        """A ``ClaimConnection`` to ``shard``, for ``leases.claim``."""
        timeout = self.settings.acquire_timeout
        async with self._claim_pools[shard].acquire(timeout=timeout) as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self, shard: int) -> AsyncIterator[Connection]:
        timeout = self.settings.acquire_timeout
        async with self._pools[shard].acquire(timeout=timeout) as conn, conn.transaction():
            yield conn
