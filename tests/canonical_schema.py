"""``make schema``: rewrite ``src/tickwork/store/schema.sql`` from a freshly migrated shard.

Uses the server of ``TICKWORK_TEST_DATABASE_URL`` when set, or starts a private one
from the pgserver wheel (as the tests do), migrates one shard of a scratch database
and writes what it describes (``tickwork.store.catalog.describe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tickwork.core.shards import ShardMap
from tickwork.store import catalog, database, migrate

TARGET: Final = Path(__file__).resolve().parent.parent / "src/tickwork/store/schema.sql"
SCRATCH: Final = f"tickwork_schema_{os.getpid()}"


@contextlib.contextmanager
def server() -> Iterator[str]:
    external = os.environ.get("TICKWORK_TEST_DATABASE_URL")
    if external:
        yield external
        return
    import pgserver

    folder = tempfile.mkdtemp(prefix="tickwork-schema-pg-")
    pg = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield pg.get_uri()
    finally:
        pg.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


async def describe_fresh_shard(server_url: str) -> str:
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{SCRATCH}"')
    finally:
        await admin.close()
    try:
        url = urlunsplit(urlsplit(server_url)._replace(path="/" + SCRATCH))
        (shard,) = ShardMap.from_dsns([url], 1).shards
        await migrate.migrate_all((shard,))
        conn = await database.connect(shard)
        try:
            return await catalog.describe(conn)
        finally:
            await conn.close()
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{SCRATCH}" WITH (FORCE)')
        finally:
            await admin.close()


def main() -> None:
    with server() as url:
        text = asyncio.run(describe_fresh_shard(url))
    if not TARGET.exists() or TARGET.read_text("utf-8") != text:
        TARGET.write_text(text, "utf-8")
        print(f"rewrote {TARGET.relative_to(TARGET.parents[3])}", file=sys.stderr)
    else:
        print(f"{TARGET.name} is current", file=sys.stderr)


if __name__ == "__main__":
    main()
