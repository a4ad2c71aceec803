"""The expand/contract rule of migrations (docs/operations.md, Upgrade), held where a
test can tell: a migration may add, never drop, rename or retype what the previous
release reads; the contraction comes one release later, when nothing running reads it.

``tests/previous_release`` holds the previous release's schema and statements. Against
them:

- the schemas are compared: every table, column (with its type), view column, sequence
  and unique index the previous release's statements name must still be there, as it
  was; a column may not become NOT NULL, and a new NOT NULL column needs a default on a
  table the previous release inserts into;
- each migration added since is read for what the schema cannot show: a table dropped
  and made again (its rows gone), a column dropped or renamed;
- every statement of the previous release prepares against the current schema;
- no statement's result changes when a migration adds a column to every table and view
  (a ``*`` would: the pools of a running release hold it prepared, and PostgreSQL
  refuses a prepared statement whose result changed inside a transaction).

What the previous release does not name may go. Anything else needs an entry in
``CONTRACTED``, naming the release whose migration removes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import asyncpg
from conftest import TEST_SHARDS
from pg_server import unpreparable

from tickwork.core.shards import ShardMap
from tickwork.store import catalog, database, migrate, queries

PREVIOUS: Final = Path(__file__).parent / "previous_release"

# What a migration may remove although the previous release names it, each with the
# release that removes it (after a release that stopped reading it): "column
# live_runs.payload": "0.4.0". Empty while nothing was contracted.
CONTRACTED: Final[Mapping[str, str]] = {}


# --- reading a schema.sql ---------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    type: str
    not_null: bool
    default: bool


@dataclass
class Schema:
    tables: dict[str, dict[str, Column]] = field(default_factory=dict)
    views: dict[str, list[str]] = field(default_factory=dict)
    sequences: set[str] = field(default_factory=set)
    unique_indexes: set[str] = field(default_factory=set)
    migrations: list[int] = field(default_factory=list)


_TABLE = re.compile(r"^CREATE TABLE (\w+) \(\n(.*?)\n\)", re.MULTILINE | re.DOTALL)
_COLUMN = re.compile(r"^    (\w+) (.+?)(?: NOT NULL)?(?: DEFAULT .*| GENERATED .*)?,?$")
_VIEW = re.compile(r"^CREATE VIEW (\w+) AS SELECT (.*?)\n   FROM ", re.MULTILINE | re.DOTALL)
_SEQUENCE = re.compile(r"^CREATE SEQUENCE (\w+) ", re.MULTILINE)
_UNIQUE = re.compile(r"^CREATE UNIQUE INDEX (\w+) ", re.MULTILINE)
_APPLIED = re.compile(r"^-- migration (\d{4})_\w+$", re.MULTILINE)


def _top_level(text: str, separator: str) -> list[str]:
    """``text`` split at each ``separator`` outside parentheses and quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for index, char in enumerate(text):
        if char == "'":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        elif not quoted and depth == 0 and text.startswith(separator, index):
            parts.append(text[start:index])
            start = index + len(separator)
    parts.append(text[start:])
    return parts


def _output_name(item: str) -> str:
    """The column name a select-list item gives (``x AS name``, ``t.name``, ``name``)."""
    named = _top_level(item.strip(), " AS ")
    return named[-1].strip() if len(named) > 1 else item.strip().rsplit(".", 1)[-1]


def parse(text: str) -> Schema:
    schema = Schema(migrations=[int(v) for v in _APPLIED.findall(text)])
    for name, body in _TABLE.findall(text):
        columns = {}
        for line in body.splitlines():
            match = _COLUMN.match(line)
            assert match is not None, line
            columns[match.group(1)] = Column(
                match.group(2), " NOT NULL" in line, " DEFAULT " in line or " GENERATED " in line
            )
        schema.tables[name] = columns
    for name, select in _VIEW.findall(text):
        schema.views[name] = [_output_name(item) for item in _top_level(select, ",")]
    schema.sequences = set(_SEQUENCE.findall(text))
    schema.unique_indexes = set(_UNIQUE.findall(text))
    return schema


# --- the rule ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Previous:
    schema: Schema
    sql: str  # every statement it sends

    def names(self, word: str) -> bool:
        return re.search(rf"\b{re.escape(word)}\b", self.sql) is not None

    def inserts_into(self, table: str) -> bool:
        return re.search(rf"\bINSERT INTO {re.escape(table)}\b", self.sql) is not None


def previous_release() -> Previous:
    sql = "\n".join(p.read_text("utf-8") for p in sorted((PREVIOUS / "sql").glob("*.sql")))
    return Previous(parse((PREVIOUS / "schema.sql").read_text("utf-8")), sql)


def broken(previous: Previous, current: Schema) -> list[str]:
    """What ``current`` removed or changed of what ``previous`` reads, as
    ``"<kind> <name>: <what happened>"``."""
    found: list[str] = []
    old = previous.schema
    for table, columns in old.tables.items():
        now = current.tables.get(table)
        if now is None:
            if previous.names(table):
                found.append(f"table {table}: dropped or renamed")
            continue
        for name, column in columns.items():
            key = f"column {table}.{name}"
            if name not in now:
                if previous.names(name):
                    found.append(f"{key}: dropped or renamed")
            elif now[name].type != column.type:
                found.append(f"{key}: type {column.type} became {now[name].type}")
            elif now[name].not_null and not column.not_null:
                found.append(f"{key}: became NOT NULL")
        for name, column in now.items():
            new_required = column.not_null and not column.default
            if name not in columns and new_required and previous.inserts_into(table):
                found.append(f"column {table}.{name}: new, NOT NULL without a default")
    for view, columns in old.views.items():
        now_view = current.views.get(view)
        if now_view is None:
            if previous.names(view):
                found.append(f"view {view}: dropped or renamed")
            continue
        for name in columns:
            if name not in now_view and previous.names(name):
                found.append(f"column {view}.{name}: dropped from the view")
    for sequence in sorted(old.sequences - current.sequences):
        if previous.names(sequence):
            found.append(f"sequence {sequence}: dropped or renamed")
    # ON CONFLICT arbitrates on a unique index: without it the statement fails.
    for index in sorted(old.unique_indexes - current.unique_indexes):
        found.append(f"unique index {index}: dropped or renamed")
    return found


_STATEMENTS: Final = (
    (re.compile(r"\bDROP TABLE (?:IF EXISTS )?([\w, ]+?)(?: CASCADE| RESTRICT)?;", re.I), "table"),
    (re.compile(r"\bALTER TABLE (?:ONLY )?(\w+) DROP (?:COLUMN )?(?:IF EXISTS )?(\w+)", re.I), ""),
    (re.compile(r"\bALTER TABLE (?:ONLY )?(\w+) RENAME (?:COLUMN )?(\w+) TO ", re.I), ""),
    (re.compile(r"\bALTER TABLE (\w+) RENAME TO ", re.I), "table"),
)


def scanned(sql: str, previous: Previous) -> list[str]:
    """What a migration's statements remove of the previous release's tables, whatever
    the schema looks like after it (a table dropped and made again loses its rows)."""
    text = re.sub(r"\s+", " ", re.sub(r"--[^\n]*", "", sql))
    found: list[str] = []
    tables = previous.schema.tables
    for pattern, kind in _STATEMENTS:
        for match in pattern.finditer(text):
            if kind == "table":
                for table in (t.strip() for t in match.group(1).split(",")):
                    if table in tables and previous.names(table):
                        found.append(f"table {table}: {match.group(0).strip()}")
                continue
            table, column = match.group(1), match.group(2)
            if column.upper() in ("CONSTRAINT", "TO"):
                continue  # a constraint loosened, or the table renamed (above)
            if column in tables.get(table, {}) and previous.names(column):
                found.append(f"column {table}.{column}: {match.group(0).strip()}")
    return found


def refused(problems: Iterable[str], contracted: Mapping[str, str] = CONTRACTED) -> list[str]:
    return [p for p in problems if p.split(":", 1)[0] not in contracted]


# --- the tests --------------------------------------------------------------------------


def test_no_migration_since_the_previous_release_removes_what_it_reads() -> None:
    previous = previous_release()
    current = parse(catalog.canonical())
    assert previous.schema.tables and previous.schema.views and previous.sql
    latest = previous.schema.migrations[-1]
    assert current.migrations[: len(previous.schema.migrations)] == previous.schema.migrations
    problems = broken(previous, current)
    for migration in migrate.migrations():
        if migration.version > latest:
            problems += [
                f"{p} (migration {migration.version:04d}_{migration.name})"
                for p in scanned(migration.sql, previous)
            ]
    assert refused(problems) == [], (
        "a migration removes what the previous release reads: add instead, and contract "
        "one release later (docs/operations.md, Upgrade), or list it in CONTRACTED"
    )


BREAKING: Final = [
    ("ALTER TABLE definitions RENAME COLUMN paused TO is_paused", "column definitions.paused"),
    (
        "ALTER TABLE enqueue_buckets ALTER COLUMN tokens TYPE numeric",
        "column enqueue_buckets.tokens",
    ),
    ("ALTER TABLE live_runs ALTER COLUMN last_error SET NOT NULL", "column live_runs.last_error"),
    ("ALTER TABLE moved_runs ADD COLUMN reason text NOT NULL", "column moved_runs.reason"),
    ("DROP VIEW run_attempts", "view run_attempts"),
    ("ALTER TABLE scheduler_members RENAME TO replicas", "table scheduler_members"),
    ("ALTER SEQUENCE fencing_tokens RENAME TO tokens", "sequence fencing_tokens"),
]
HARMLESS: Final = [
    "ALTER TABLE moved_runs ADD COLUMN reason text",
    "ALTER TABLE moved_runs ADD COLUMN origin text NOT NULL DEFAULT 'reshard'",
    "CREATE TABLE upgrade_probe (id integer NOT NULL)",
    "CREATE INDEX audit_log_by_actor ON audit_log (actor)",
    "DROP INDEX attempts_run",  # slower reads, never failing ones
]


async def _described_after(url: str, statements: Iterable[str]) -> Schema:
    shard = ShardMap.from_dsns([url], TEST_SHARDS)[0]
    conn = await database.connect(shard)
    try:
        for statement in statements:
            await conn.execute(statement)
        return parse(await catalog.describe(conn))
    finally:
        await conn.close()


async def test_a_breaking_change_is_named(database_url: str) -> None:
    """Breaking changes made on a real shard, described as schema.sql is: each is named,
    and passes once contracted on purpose."""
    previous = previous_release()
    problems = broken(previous, await _described_after(database_url, dict(BREAKING)))
    assert sorted(p.split(":", 1)[0] for p in problems) == sorted(dict(BREAKING).values())
    assert refused(problems, {named: "9.9.9" for _, named in BREAKING}) == []


async def test_additions_and_what_nobody_reads_pass(database_url: str) -> None:
    previous = previous_release()
    assert broken(previous, await _described_after(database_url, HARMLESS)) == []
    # A column the previous release never names may go (nothing of its reads it).
    unread = Previous(previous.schema, previous.sql.replace("moved_at", "moved_when"))
    dropped = await _described_after(database_url, ["ALTER TABLE moved_runs DROP COLUMN moved_at"])
    assert broken(unread, dropped) == []
    assert [p.split(":")[0] for p in broken(previous, dropped)] == ["column moved_runs.moved_at"]


def test_a_migration_that_drops_and_remakes_a_table_is_refused() -> None:
    """The schema after it looks the same; the rows are gone."""
    previous = previous_release()
    remade = "DROP TABLE audit_log;\nCREATE TABLE audit_log (id bigint);"
    assert scanned(remade, previous) == ["table audit_log: DROP TABLE audit_log;"]
    assert broken(previous, parse(catalog.canonical())) == []
    for sql, named in [
        ("ALTER TABLE live_runs DROP COLUMN payload;", "column live_runs.payload"),
        ("alter table live_runs drop payload;", "column live_runs.payload"),
        ("ALTER TABLE definitions RENAME COLUMN spec TO document;", "column definitions.spec"),
        ("DROP TABLE IF EXISTS moved_runs, run_keys CASCADE;", "table moved_runs"),
    ]:
        assert scanned(sql, previous)[0].split(":")[0] == named, sql
    harmless = (
        "-- DROP TABLE audit_log; (a comment)\n"
        "ALTER TABLE live_runs DROP CONSTRAINT live_runs_state_check;\n"
        "CREATE TABLE scratch (id integer); DROP TABLE scratch;\n"
        "ALTER TABLE live_runs ADD COLUMN note text;"
    )
    assert scanned(harmless, previous) == []


async def test_every_statement_of_the_previous_release_prepares_against_this_schema(
    database_url: str,
) -> None:
    """The previous release's code path, statement by statement, on a shard migrated by
    this one: a column it reads dropped, a type it binds changed, fails here."""
    shard = ShardMap.from_dsns([database_url], TEST_SHARDS)[0]
    statements: dict[str, str] = {}
    for path in sorted((PREVIOUS / "sql").glob("*.sql")):
        statements.update(queries.parse(path.read_text("utf-8"), path.name))
    assert len(statements) >= 30
    assert await unpreparable(shard, statements) == {}


# Whole rows on purpose: a reshard copies a job's rows between shards of one version.
WHOLE_ROWS: Final = re.compile(r"reshard_copy_\w+")


async def test_no_statement_answers_columns_a_migration_may_add(database_url: str) -> None:
    shard = ShardMap.from_dsns([database_url], TEST_SHARDS)[0]
    named = {n: sql for n, sql in queries.all_queries().items() if not WHOLE_ROWS.fullmatch(n)}

    async def results() -> dict[str, list[str]]:
        conn = await database.connect(shard)
        try:
            found = {}
            for name, sql in named.items():
                try:
                    statement = await conn.prepare(sql)
                except asyncpg.PostgresError:
                    continue  # DDL and the like: the migration tests prepare them all
                found[name] = [attribute.name for attribute in statement.get_attributes()]
            return found
        finally:
            await conn.close()

    before = await results()
    conn = await database.connect(shard)
    try:
        for (table,) in await conn.fetch(RELATIONS, ["r", "p"]):
            await conn.execute(f"ALTER TABLE {table} ADD COLUMN expand_probe integer")
        for (view,) in await conn.fetch(RELATIONS, ["v"]):
            body = (await conn.fetchval("SELECT pg_get_viewdef($1::regclass)", view)).rstrip()
            await conn.execute(
                f"CREATE OR REPLACE VIEW {view} AS SELECT old.*, NULL::integer AS expand_probe"
                f" FROM ({body.rstrip(';')}) AS old"
            )
    finally:
        await conn.close()
    after = await results()
    assert len(before) >= 30
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert changed == [], "name the columns a statement answers (no *): " + ", ".join(changed)


RELATIONS: Final = """
SELECT c.relname
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind::text = ANY($1::text[]) AND NOT c.relispartition
ORDER BY c.relname
"""
