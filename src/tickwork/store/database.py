"""Connection pools, one per shard, each bound to its shard's schema (bounded as
``PoolSettings`` says)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Final, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tickwork.core.settings import PoolSettings
from tickwork.core.shards import Shard, ShardMap
from tickwork.store import outages

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


async def connect(
    shard: Shard,
    connect_timeout: float = _DEFAULT_POOL.connect_timeout,
    *,
    name: str | None = None,
) -> asyncpg.Connection:
    """A single connection to ``shard`` (for migrations, listeners, maintenance and
    tests); ``name`` its ``application_name`` when not a role's."""
    return await asyncpg.connect(
        shard.dsn, server_settings=server_settings(shard, name), timeout=connect_timeout
    )


class Database:
    """Pools for every shard of a ``ShardMap``; use as an async context manager."""

    def __init__(self, shard_map: ShardMap, settings: PoolSettings | None = None) -> None:
        self.shard_map = shard_map
        self.settings = settings or PoolSettings()
        self._pools: list[asyncpg.Pool] = []

    async def open(self) -> None:
        settings = self.settings
        self._pools = list(
            await asyncio.gather(
                *(
                    asyncpg.create_pool(
                        shard.dsn,
                        server_settings=server_settings(shard),
                        min_size=settings.min_size,
                        max_size=settings.max_size,
                        command_timeout=settings.command_timeout,
                        timeout=settings.connect_timeout,
                    )
                    for shard in self.shard_map.shards
                )
            )
        )

    async def close(self) -> None:
        """Close every pool gracefully, or, when a shard does not answer within the
        statement timeout (a hung link), drop its connections."""
        pools, self._pools = self._pools, []

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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
    async def transaction(self, shard: int) -> AsyncIterator[Connection]:
        timeout = self.settings.acquire_timeout
        async with self._pools[shard].acquire(timeout=timeout) as conn, conn.transaction():
            yield conn
