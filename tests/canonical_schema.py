"""``make schema``: rewrite ``src/tickwork/store/schema.sql`` from a freshly migrated shard.

Uses the server of ``TICKWORK_TEST_DATABASE_URL`` when set, or starts a private one
from the pgserver wheel (as the tests do), migrates one shard of a scratch database
and writes what it describes (``tickwork.store.catalog.describe``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Final

from pg_server import scratch_database, server

from tickwork.core.shards import ShardMap
from tickwork.store import catalog, database, migrate

TARGET: Final = Path(__file__).resolve().parent.parent / "src/tickwork/store/schema.sql"


async def describe_fresh_shard(server_url: str) -> str:
    async with scratch_database(server_url, "tickwork_schema") as url:
        (shard,) = ShardMap.from_dsns([url], 1).shards
        await migrate.migrate_all((shard,))
        conn = await database.connect(shard)
        try:
            return await catalog.describe(conn)
        finally:
            await conn.close()


def main() -> None:
    with server("tickwork-schema-pg-") as url:
        text = asyncio.run(describe_fresh_shard(url))
    if not TARGET.exists() or TARGET.read_text("utf-8") != text:
        TARGET.write_text(text, "utf-8")
        print(f"rewrote {TARGET.relative_to(TARGET.parents[3])}", file=sys.stderr)
    else:
        print(f"{TARGET.name} is current", file=sys.stderr)


if __name__ == "__main__":
    main()
