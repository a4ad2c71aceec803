"""The PostgreSQL the tests (and ``make schema``) run against, and databases on it.

Without ``TICKWORK_TEST_DATABASE_URL`` the pgserver wheel starts a private server in a
temporary directory; with it, that server is used (databases are created and dropped).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tickwork.core.shards import Shard, ShardMap
from tickwork.store import database, migrate

_names = itertools.count()

# A private server's files go to memory where the host has a RAM-backed filesystem with
# room: every test clones a template database and drops it, and on a disk each clone's
# thousand-odd file creations and deletions took a second on some hosts (40 ms in
# memory), more than half of the suite's time. Nothing here needs to outlive the run.
MEMORY_FOLDER = Path("/dev/shm")
MEMORY_NEEDED = 4 << 30


def _scratch_folder(prefix: str) -> str:
    if (
        MEMORY_FOLDER.is_dir()
        and os.access(MEMORY_FOLDER, os.W_OK)
        and shutil.disk_usage(MEMORY_FOLDER).free >= MEMORY_NEEDED
    ):
        return tempfile.mkdtemp(prefix=prefix, dir=MEMORY_FOLDER)
    return tempfile.mkdtemp(prefix=prefix)


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (keeps host, socket and credentials)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@contextlib.contextmanager
def server(prefix: str, setup: str = "") -> Iterator[str]:
    """The server's URL; a private server runs the SQL ``setup`` first."""
    external = os.environ.get("TICKWORK_TEST_DATABASE_URL")
    if external:
        yield external
        return
    import pgserver

    folder = _scratch_folder(prefix)
    private = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        if setup:
            private.psql(setup)
        yield private.get_uri()
    finally:
        private.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


async def _admin(server_url: str, *statements: str) -> None:
    admin = await asyncpg.connect(server_url)
    try:
        for statement in statements:
            await admin.execute(statement)
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def scratch_database(
    server_url: str, prefix: str, template: str | None = None
) -> AsyncIterator[str]:
    """A new database (empty, or a clone of ``template``), dropped afterwards."""
    name = f"{prefix}_{os.getpid()}_{next(_names)}"
    clone = f' TEMPLATE "{template}"' if template else ""
    await _admin(server_url, f'CREATE DATABASE "{name}"{clone}')
    try:
        yield with_database(server_url, name)
    finally:
        await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def migrated_template(server_url: str, name: str, shards: int) -> str:
    """Database ``name`` made anew with ``shards`` migrated shards, for tests to clone;
    its URL."""
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    await migrate.migrate_all(ShardMap.from_dsns([url], shards).shards)
    return url


async def unpreparable(shard: Shard, statements: Mapping[str, str]) -> dict[str, str]:
    """The named statements that do not prepare on ``shard``, with the error of each."""
    conn = await database.connect(shard)
    failures: dict[str, str] = {}
    try:
        for name, sql in statements.items():
            try:
                await conn.prepare(sql)
            except asyncpg.PostgresError as error:
                failures[name] = f"{type(error).__name__}: {error}"
    finally:
        await conn.close()
    return failures
