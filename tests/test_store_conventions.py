"""Two conventions of the store, held by these checks rather than by review.

1. A statement that writes runs marks their jobs changed. The operator's status pass
   reads the status of the jobs in ``changed_jobs`` only (``store.changes``), so a
   statement that inserts, updates or deletes ``live_runs`` or ``finished_runs`` and
   leaves the job unmarked leaves its ScheduledJob's status stale. Every named statement
   of ``store/sql/*.sql`` is read; one that need not mark is on ``UNMARKED``, with why.
2. Only the store talks to the database driver. Its modules hold the statements and the
   transactions; the layers above compose them (``engine.materialiser`` decides the
   runs, ``store.materialise`` writes them). No module of tickwork outside
   ``tickwork/store/`` calls a connection's statement methods or names a query
   (``tickwork.store.queries``); an exception is on ``DRIVER_OUTSIDE_STORE``, with why.

Both read source text; each also checks that its allow-list names only what still needs
it, and that its reader finds what it looks for in a sample, so a reader that finds
nothing cannot pass for a clean tree.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Final

import tickwork
from tickwork.core.records import Origin
from tickwork.store import changes, queries
from tickwork.store import materialise as store_materialise
from tickwork.store.database import Database

RUN_TABLES: Final = frozenset({"live_runs", "finished_runs"})
MARKS: Final = "changed_jobs"

# Statements that write runs without marking their jobs, and why that is right.
UNMARKED: Final = {
    "heartbeat": (
        "extends leases: the runs stay leased, and a lease's expiry is no part of a "
        "job's status (job_statuses)"
    ),
    "request_cancel": (
        "asks a leased run to stop: it stays leased (cancel_requested is no part of a "
        "status) until its completion or the reaper ends it, and those mark"
    ),
    "replace_running": (
        "overlapPolicy Replace asks a job's running runs to stop (cancel_requested, "
        "last_error; the state is unchanged), in the due flip whose settle_overlap, "
        "which marks, then starts the job's new fire and ends the runs that end now"
    ),
    "set_dry_run": (
        "a job's runs not leased yet follow its dryRun switch: the runs' flag is no part "
        "of a status, and the definition's upsert in the same transaction "
        "(engine.jobs via store.definitions.upsert) marks the job"
    ),
    "cancel_runs_of_job": (
        "runs only as a job is deleted, with its definition, in one transaction "
        "(store.definitions.delete): a job without a definition has no status to show "
        "(job_statuses leaves it out)"
    ),
    "reshard_clear_job": (
        "on the new shard, clears what an interrupted copy of a job left: the copy that "
        "follows in the same transaction ends with reshard_mark_changed"
    ),
    "enqueue_notifications": (
        "runs of the system job tickwork.notify, which has no definition and no "
        "ScheduledJob: there is no status to update"
    ),
}

# Modules outside the store that still call the driver or name a query, and why.
DRIVER_OUTSIDE_STORE: Final[dict[str, str]] = {}

# The methods of asyncpg's connections (and pools) that run SQL.
DRIVER_METHODS: Final = frozenset(
    {
        "execute",
        "executemany",
        "fetch",
        "fetchrow",
        "fetchval",
        "copy_records_to_table",
        "copy_to_table",
        "copy_from_query",
        "copy_from_table",
        "prepare",
        "cursor",
    }
)
QUERIES_MODULE: Final = "tickwork.store.queries"

# --- reading SQL ------------------------------------------------------------------------

# String literals and comments, in one pass: a quote inside a comment ("the job's") or
# a dash pair inside a literal must not start the other.
_NOT_CODE: Final = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.DOTALL)
# A write names its table right after the verb. FOR [NO KEY] UPDATE is a row lock and
# DO UPDATE (ON CONFLICT) writes the table the INSERT named: neither is counted.
_WRITE: Final = re.compile(
    r"\b(?P<not_a_write>FOR\s+(?:NO\s+KEY\s+)?|DO\s+)?"
    r"(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|MERGE\s+INTO|TRUNCATE(?:\s+TABLE)?)"
    r"\s+(?:ONLY\s+)?(?P<table>\w+)",
    re.IGNORECASE,
)


def code_of(sql: str) -> str:
    return _NOT_CODE.sub(lambda m: "''" if m.group().startswith("'") else " ", sql)


def tables_written(sql: str) -> frozenset[str]:
    return frozenset(
        m["table"].lower() for m in _WRITE.finditer(code_of(sql)) if not m["not_a_write"]
    )


def named_statements() -> Iterator[tuple[str, str, str]]:
    """``(file, name, statement)`` of every named statement of ``store/sql/*.sql``."""
    folder = resources.files("tickwork.store").joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".sql"):
            for name, sql in queries.parse(entry.read_text("utf-8"), entry.name).items():
                yield entry.name, name, sql


def unmarked_run_writes() -> dict[str, str]:
    """``{name: file}`` of the statements that write runs and do not mark their jobs."""
    found: dict[str, str] = {}
    for file, name, sql in named_statements():
        written = tables_written(sql)
        if written & RUN_TABLES and MARKS not in written:
            found[name] = file
    return found


def test_every_statement_that_writes_runs_marks_their_jobs() -> None:
    unmarked = {
        f"{file}: {name}" for name, file in unmarked_run_writes().items() if name not in UNMARKED
    }
    assert not unmarked, (
        "these statements write live_runs or finished_runs without marking the jobs in "
        "changed_jobs, so the jobs' status would go stale: add the marking CTE (INSERT "
        "INTO changed_jobs ... ON CONFLICT DO NOTHING), or put the statement on UNMARKED "
        f"with the reason it need not mark: {sorted(unmarked)}"
    )


def test_the_unmarked_list_names_only_statements_that_write_runs_unmarked() -> None:
    names = {name for _, name, _ in named_statements()}
    stale = {name for name in UNMARKED if name not in unmarked_run_writes()}
    assert not stale, (
        "UNMARKED names statements that do not exist, do not write runs or mark their "
        f"jobs now: take them off the list: {sorted(stale)} "
        f"(missing: {sorted(stale - names)})"
    )
    assert all(reason.strip() for reason in UNMARKED.values())


def test_writes_are_read_through_aliases_locks_literals_and_comments() -> None:
    assert tables_written("UPDATE live_runs AS r SET state = 'ready'") == {"live_runs"}
    assert tables_written("DELETE FROM ONLY finished_runs WHERE id = $1") == {"finished_runs"}
    assert tables_written(
        "WITH x AS (INSERT INTO live_runs SELECT 1 RETURNING id) "
        "INSERT INTO changed_jobs SELECT 1 ON CONFLICT (tenant, job) DO UPDATE SET job = 1"
    ) == {"live_runs", "changed_jobs"}
    # Row locks, and the words inside literals and comments, write nothing.
    assert tables_written("SELECT id FROM live_runs FOR UPDATE OF r SKIP LOCKED") == set()
    assert tables_written("SELECT 1 FROM live_runs FOR NO KEY UPDATE") == set()
    assert tables_written("SELECT 'DELETE FROM live_runs'") == set()
    assert tables_written("-- the job's UPDATE live_runs\nSELECT '--', 1") == set()
    assert tables_written("SELECT 1 /* INSERT INTO finished_runs */") == set()
    # The statements the convention is about are found: the reader reads the real files.
    assert "promote_due" not in unmarked_run_writes()
    assert "heartbeat" in unmarked_run_writes()


async def test_runs_inserted_without_an_advance_mark_their_job(database: Database) -> None:
    """insert_planned_runs marks on its own: a backfill runs it with no
    advance_definitions after it, and its job's status would show none of its runs."""
    due = datetime(2026, 3, 15, 0, 0, tzinfo=UTC)
    run = store_materialise.PlannedRun(
        tenant="acme",
        job="report",
        queue="default",
        priority=1,
        origin=Origin.cron,
        max_attempts=3,
        retry_base=1.0,
        retry_max=10.0,
        timeout_seconds=60,
        due_at=due,
        ready_at=due,
        start_deadline=None,
        idempotency_key=f"acme/report@{due.isoformat()}",
        payload=None,
        concurrency=0,
        dry_run=False,
        overlap=None,
    )
    async with database.connection(0) as conn:
        await changes.drain(conn, 1000)
        async with conn.transaction():
            inserted = await store_materialise.insert_runs(conn, [run], due)
        assert [row["state"] for row in inserted] == ["ready"]
        marked, _ = await changes.drain(conn, 1000)
        assert marked == [("acme", "report")]
        # Its key is taken: a repeat inserts nothing, and marks nothing.
        assert await store_materialise.insert_runs(conn, [run], due) == []
        assert (await changes.drain(conn, 1000))[0] == []


# --- reading Python ---------------------------------------------------------------------

PACKAGE: Final = Path(tickwork.__file__).resolve().parent


def driver_uses(source: str) -> list[str]:
    """Where ``source`` calls a connection's statement methods or names the queries."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in DRIVER_METHODS
        ):
            found.append((node.lineno, f".{node.func.attr}()"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = {f"{node.module}.{alias.name}" for alias in node.names}
            if node.module == QUERIES_MODULE or QUERIES_MODULE in names:
                found.append((node.lineno, f"imports {QUERIES_MODULE}"))
        elif isinstance(node, ast.Import) and any(
            alias.name == QUERIES_MODULE for alias in node.names
        ):
            found.append((node.lineno, f"imports {QUERIES_MODULE}"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def modules_outside_the_store() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "store":
            continue
        parts = ("tickwork", *relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def driver_uses_outside_the_store() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for module, path in modules_outside_the_store():
        uses = driver_uses(path.read_text("utf-8"))
        if uses:
            found[module] = uses
    return found


def test_only_the_store_calls_the_database_driver() -> None:
    outside = {
        module: uses
        for module, uses in driver_uses_outside_the_store().items()
        if module not in DRIVER_OUTSIDE_STORE
    }
    assert not outside, (
        "these modules run SQL themselves: move the statements and the transaction "
        "into a store module behind typed rows (as store.materialise), or put the "
        f"module on DRIVER_OUTSIDE_STORE with the reason: {outside}"
    )


def test_the_driver_allow_list_names_only_modules_that_still_need_it() -> None:
    stale = set(DRIVER_OUTSIDE_STORE) - set(driver_uses_outside_the_store())
    assert not stale, f"these modules no longer call the driver: take them off: {stale}"
    assert all(reason.strip() for reason in DRIVER_OUTSIDE_STORE.values())


def test_driver_calls_and_query_imports_are_found() -> None:
    source = """
from tickwork.store import queries
from tickwork.store.queries import get
import tickwork.store.queries
from tickwork.store import reshard, runs

async def move(conn, database):
    await conn.fetch(queries.get("x"), 1)
    async with database.connection(0) as other:
        await other.copy_records_to_table("t", records=[])
    await reshard.move_job(conn, conn, "acme", "job")
    await runs.notify_ready(conn, ["default"])
"""
    assert driver_uses(source) == [
        "line 2: imports tickwork.store.queries",
        "line 3: imports tickwork.store.queries",
        "line 4: imports tickwork.store.queries",
        "line 8: .fetch()",
        "line 10: .copy_records_to_table()",
    ]
    # The tree is read: the engine's modules are among those checked.
    modules = dict(modules_outside_the_store())
    assert "tickwork.engine.materialiser" in modules
    assert "tickwork.store.materialise" not in modules
