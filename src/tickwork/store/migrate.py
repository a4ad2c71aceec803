"""Versioned migrations, applied per shard.

Migrations are ``migrations/NNNN_name.sql`` files, applied in order inside one
transaction per shard while holding an advisory lock, so two ``tickwork migrate`` runs
(or two pods starting) never apply the same step twice. ``schema_version`` records what
each shard has; ``shard_meta`` records which shard a schema is, so a DSN list given in
the wrong order is refused instead of silently mixing shards.

Every migration follows the expand/contract rule of docs/operations.md (Upgrade): it
adds what the new code reads and drops nothing the previous release still reads, so the
previous release keeps serving a shard it migrated. A line ``-- compatible-from: N``
says which code still runs against the shard once it is applied (the oldest schema
version; by default the version just before the migration's); ``schema_version``
records it, and ``compatibility`` judges a shard by it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Final

from tickwork.core.shards import Shard
from tickwork.store import compatibility, database, queries, retention
from tickwork.store.database import Connection

logger = logging.getLogger(__name__)

# fullmatch, never ``$``: it would also match before a final newline.
_FILE: Final = re.compile(r"([0-9]{4})_([a-z0-9_]+)\.sql")
_IDENTIFIER: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_COMPATIBLE_FROM: Final = re.compile(r"^--\s*compatible-from:\s*([0-9]+)\s*$", re.MULTILINE)
# Any constant works; it only has to be the same in every tickwork process.
_ADVISORY_LOCK: Final = 0x7469636B776F726B  # "tickwork"


class SQL(queries.Statements):
    migration_lock: str
    create_schema_ddl: str
    use_schema: str
    create_version_table: str
    add_compatible_from: str
    shard_identity: str
    claim_shard_identity: str
    applied_versions: str
    record_version: str


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def compatible_from(self) -> int:
        """The oldest code (by schema version) that runs against a shard with this
        migration applied: its ``-- compatible-from:`` line, else the version before."""
        found = _COMPATIBLE_FROM.findall(self.sql)
        if not found:
            return self.version - 1
        if len(found) > 1 or int(found[0]) > self.version:
            raise RuntimeError(
                f"migration {self.version:04d}_{self.name}: one `-- compatible-from: N` "
                f"line at most, with N <= {self.version}"
            )
        return int(found[0])


@cache
def migrations() -> tuple[Migration, ...]:
    found: list[Migration] = []
    folder = resources.files("tickwork.store").joinpath("migrations")
    for entry in folder.iterdir():
        match = _FILE.fullmatch(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration versions must be 1..N without gaps, found {versions}")
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1].version


def _checked_schema(schema: str) -> str:
    # The server quotes the name into DDL (format %I); a name outside what
    # shards.schema_name() makes is refused before it gets there.
    if not _IDENTIFIER.fullmatch(schema):
        raise ValueError(f"invalid schema name {schema!r}")
    return schema


async def migrate_shard(conn: Connection, shard: Shard, shard_count: int) -> list[int]:
    """Bring one shard to the latest schema; return the versions applied now."""
    schema = _checked_schema(shard.schema)
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute(SQL.migration_lock, _ADVISORY_LOCK)
        await conn.execute(await conn.fetchval(SQL.create_schema_ddl, schema))
        await conn.fetchval(SQL.use_schema, schema)
        await conn.execute(SQL.create_version_table)
        await conn.execute(SQL.add_compatible_from)
        applied = {row["version"] for row in await conn.fetch(SQL.applied_versions)}
        for migration in migrations():
            if migration.version in applied:
                continue
            logger.debug(
                "shard %d: applying migration %04d_%s",
                shard.number,
                migration.version,
                migration.name,
                extra={
                    "action": "migrate",
                    "shard": shard.number,
                    "version": migration.version,
                    "migration": migration.name,
                },
            )
            await conn.execute(migration.sql)
            await conn.execute(
                SQL.record_version, migration.version, migration.name, migration.compatible_from
            )
            applied_now.append(migration.version)
        if applied_now:
            first, last = applied_now[0], applied_now[-1]
            logger.info(
                "shard %d: migrated to version %d (applied %s)",
                shard.number,
                last,
                f"{first:04d}" if first == last else f"{first:04d}-{last:04d}",
                extra={"action": "migrate", "shard": shard.number, "version": last},
            )
        await conn.execute(SQL.claim_shard_identity, shard.number, shard_count)
        await _check_identity(conn, shard, shard_count)
        # A dispatcher may complete runs before any scheduler has done its partition
        # maintenance: without today's partition those attempts would land in the
        # default partition for good (and the scheduler would warn about it at every
        # start that day). A migrated shard is ready to store attempts by day.
        await retention.ensure_all_partitions(conn)
    return applied_now


async def _check_identity(conn: Connection, shard: Shard, shard_count: int) -> None:
    row = await conn.fetchrow(SQL.shard_identity)
    if row is None or (row["shard"], row["shard_count"]) != (shard.number, shard_count):
        found = "nothing" if row is None else f"shard {row['shard']} of {row['shard_count']}"
        raise compatibility.identity_mismatch(shard, shard_count, found)


async def check_shard(conn: Connection, shard: Shard, shard_count: int) -> None:
    """Raise ``SchemaMismatch`` unless this release serves the shard: migrated to its
    schema version (or one ahead that keeps it working), the shard expected, no reshard
    half done (``compatibility.check``). ``compatibility.SchemaBehind`` says a
    migration is due.

    ``conn`` must have the shard's schema on its search path (``database.connect``).
    """
    await compatibility.check(conn, shard, shard_count, latest_version())


async def migrate_all(shards: tuple[Shard, ...]) -> dict[int, list[int]]:
    """Migrate every shard in turn; return the versions applied per shard."""
    result: dict[int, list[int]] = {}
    for shard in shards:
        conn = await database.connect(shard)
        try:
            result[shard.number] = await migrate_shard(conn, shard, len(shards))
        finally:
            await conn.close()
    return result
