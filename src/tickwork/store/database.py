"""Connection pools, one per shard, each bound to its shard's schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tickwork.core.shards import Shard, ShardMap

# Store functions accept a plain connection or one checked out of a pool.
Connection: TypeAlias = asyncpg.Connection | PoolConnectionProxy


@dataclass(frozen=True)
class PoolSettings:
    min_size: int = 1
    max_size: int = 4
    command_timeout: float = 30.0


def server_settings(shard: Shard) -> dict[str, str]:
    """Session settings of every connection to ``shard``: its schema comes first."""
    return {
        "search_path": shard.schema,
        "application_name": f"tickwork-shard-{shard.number}",
        # Short statements only: compiling one (the claim) took longer than running it.
        "jit": "off",
    }


async def connect(shard: Shard) -> asyncpg.Connection:
    """A single connection to ``shard`` (for migrations, listeners and tests)."""
    return await asyncpg.connect(shard.dsn, server_settings=server_settings(shard))


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
                    )
                    for shard in self.shard_map.shards
                )
            )
        )

    async def close(self) -> None:
        pools, self._pools = self._pools, []
        await asyncio.gather(*(pool.close() for pool in pools))

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

    def pool(self, shard: int) -> asyncpg.Pool:
        return self._pools[shard]

    @asynccontextmanager
    async def connection(self, shard: int) -> AsyncIterator[Connection]:
        async with self._pools[shard].acquire() as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self, shard: int) -> AsyncIterator[Connection]:
        async with self._pools[shard].acquire() as conn, conn.transaction():
            yield conn
