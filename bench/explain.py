"""``python -m bench.explain``: where claim, complete and materialise spend their time.

One shard on a private PostgreSQL, filled like a busy installation (ready runs of 10
tenants x 50 jobs in three priorities, a history of finished runs behind them), then
each hot statement runs under ``EXPLAIN (ANALYZE, BUFFERS, WAL)`` a number of times:
claim (batch 100), complete (the same 100, succeeded) and materialise (1 000 due
definitions); ``--batch`` (repeatable) and ``--tenants 1 --priorities 1`` choose the
claims' shape, and a claim is measured through each statement that serves the shape
(the merging claim, and the one-head claim when one head holds the work). The table
gives per-row figures (execution time, buffers hit, WAL
records and bytes, full-page images) as medians over the repetitions; ``--plans``
prints one plan of each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from bench import Row, Table, format_table, harness
from bench.materialiser import spec_document
from tickwork.core.shards import Shard, ShardMap
from tickwork.engine import materialiser
from tickwork.store import database, leases, migrate

DATABASE = "tickwork_bench_explain"
READY = 200_000
FINISHED = 500_000
REPEATS = 15
QUEUE = "default"
DUE = datetime(2026, 3, 15, 2, 0, tzinfo=UTC)
EXPLAIN = "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) "

# The hot table is `live_runs` from schema version 5 on, `runs` before.
FILL_READY = {
    "runs": """
INSERT INTO runs (tenant, job, queue, priority, state, origin, max_attempts, retry_base,
                  retry_max, timeout_seconds, due_at, ready_at, created_at, updated_at)
SELECT 'tenant-' || (i % $2), 'job-' || (i % 50), 'default', i % $3, 'ready', 'api', 3,
       30, 1800, 3600, now(), now() - make_interval(secs => $1 - i), now(), now()
FROM generate_series(1, $1) AS i""",
    "live_runs": """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at)
SELECT 'tenant-' || (i % $2), 'job-' || (i % 50), 'default', i % $3, 'ready', 'api', 3,
       30, 1800, 3600, now(), now() - make_interval(secs => $1 - i), now(), now()
FROM generate_series(1, $1) AS i""",
}
FILL_FINISHED = {
    "runs": """
INSERT INTO runs (tenant, job, queue, priority, state, origin, attempt, max_attempts,
                  retry_base, retry_max, timeout_seconds, due_at, ready_at, created_at,
                  updated_at, finished_at, fencing_token, leased_at)
SELECT 'tenant-' || (i % 10), 'job-' || (i % 50), 'default', i % 3,
       CASE WHEN i % 100 = 0 THEN 'dead' ELSE 'succeeded' END, 'api', 1, 3, 30, 1800,
       3600, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day',
       now(), now() - make_interval(secs => i % 86400), i, now() - interval '1 day'
FROM generate_series(1, $1) AS i""",
    "live_runs": """
INSERT INTO finished_runs (id, tenant, job, queue, priority, state, origin, attempt,
                           max_attempts, retry_base, retry_max, timeout_seconds, due_at,
                           ready_at, created_at, updated_at, finished_at, fencing_token,
                           leased_at)
SELECT -i, 'tenant-' || (i % 10), 'job-' || (i % 50), 'default', i % 3,
       CASE WHEN i % 100 = 0 THEN 'dead' ELSE 'succeeded' END, 'api', 1, 3, 30, 1800,
       3600, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day',
       now(), now() - make_interval(secs => i % 86400), i, now() - interval '1 day'
FROM generate_series(1, $1) AS i""",
}
FILL_DEFINITIONS = """
INSERT INTO definitions (tenant, name, spec, queue, priority, next_due_at, created_at,
                         updated_at)
SELECT 'tenant-' || (n % 10), 'cron-' || $3::integer || '-' || n, $1::jsonb, 'default', 1,
       $2, now(), now()
FROM generate_series(1, 1000) AS n
"""


class Explaining:
    """A connection whose one chosen statement runs under EXPLAIN ANALYZE instead."""

    def __init__(self, conn: asyncpg.Connection, target: str, plans: list[Any]) -> None:
        self._conn = conn
        self._target = target
        self._plans = plans

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        if query != self._target:
            return list(await self._conn.fetch(query, *args))
        self._plans.append(json.loads(await self._conn.fetchval(EXPLAIN + query, *args))[0])
        return []


def _totals(node: dict[str, Any], key: str) -> float:
    value = float(node.get(key, 0))
    return value  # top-level figures already include every child


def per_row(name: str, plans: Sequence[dict[str, Any]], rows: int) -> Row:
    top = [plan["Plan"] for plan in plans]
    times = [plan["Execution Time"] for plan in plans]
    return {
        "statement": name,
        "rows": rows,
        "us/row": round(statistics.median(times) * 1000 / rows, 1),
        "hit/row": round(statistics.median(_totals(t, "Shared Hit Blocks") for t in top) / rows, 1),
        "dirtied/row": round(
            statistics.median(_totals(t, "Shared Dirtied Blocks") for t in top) / rows, 2
        ),
        "WAL rec/row": round(statistics.median(_totals(t, "WAL Records") for t in top) / rows, 1),
        "WAL B/row": round(statistics.median(_totals(t, "WAL Bytes") for t in top) / rows),
        "FPI/row": round(statistics.median(_totals(t, "WAL FPI") for t in top) / rows, 2),
    }


async def hot_table(conn: asyncpg.Connection) -> str:
    found = await conn.fetchval("SELECT to_regclass('live_runs') IS NOT NULL")
    return "live_runs" if found else "runs"


async def measure(
    url: str,
    show_plans: bool,
    tenants: int,
    priorities: int,
    batches: Sequence[int] = (100,),
    ready: int = READY,
) -> list[Table]:
    shard_map = ShardMap.from_dsns([url], 1)
    await migrate.migrate_all(shard_map.shards)
    shard = shard_map.shards[0]
    conn = await database.connect(shard)
    try:
        table = await hot_table(conn)
        await conn.execute(FILL_FINISHED[table], FINISHED)
        await conn.execute(FILL_READY[table], ready, tenants, priorities)
        await conn.execute("VACUUM ANALYZE")
        # The statements a claim may run, as the dispatcher runs them: on generic plans.
        claims = {"claim": leases.CLAIM}
        if getattr(leases, "CLAIM_ONE_HEAD", None):
            claims["claim_one_head"] = leases.CLAIM_ONE_HEAD
        measured: list[tuple[str, list[Any], int]] = []
        for batch in batches:
            for name, sql in claims.items():
                claim_plans: list[Any] = []
                complete_plans: list[Any] = []
                for n in range(REPEATS):
                    worker = f"w-{name}-{batch}-{n}"
                    claim_plans.append(await _explain_claim(conn, sql, batch, worker, n, shard))
                    rows = await conn.fetch(
                        "SELECT id, fencing_token FROM runs WHERE state = 'leased' "
                        "AND lease_owner = $1",
                        worker,
                    )
                    if not rows:
                        break  # this statement does not serve this shape (several heads)
                    complete_plans.append(await _explain_complete(conn, rows))
                if complete_plans:
                    measured.append((f"{name} (batch {batch})", claim_plans, batch))
                    measured.append((f"complete ({batch} succeeded)", complete_plans, batch))
        materialise_plans: list[Any] = []
        spec = spec_document()
        for n in range(5):
            await conn.execute(FILL_DEFINITIONS, spec, DUE + timedelta(hours=n), n)
            explaining = Explaining(conn, materialiser.INSERT_PLANNED_RUNS, materialise_plans)
            await materialiser.materialise(explaining, DUE + timedelta(hours=n))
        measured.append(("materialise (1000 cron runs)", materialise_plans, 1000))
        if show_plans:
            for name, plans, _ in measured:
                print(f"-- {name}\n{json.dumps(plans[-1]['Plan'], indent=1)}\n", file=sys.stderr)
        rows_out = [per_row(name, plans, rows) for name, plans, rows in measured]
    finally:
        await conn.close()
    return [
        Table(
            f"EXPLAIN (ANALYZE, BUFFERS, WAL) per row, hot table {table!r}: {ready:,} ready "
            f"runs of {tenants} tenants x {priorities} priorities, {FINISHED:,} finished, "
            f"medians of {REPEATS} (materialise 5)",
            rows_out,
            notes=[
                "EXPLAIN ANALYZE adds timing overhead: compare the rows, not the totals",
                "us/row includes the statement's fixed cost: at batch 1 it is that cost",
            ],
        )
    ]


async def _explain_claim(
    conn: asyncpg.Connection, sql: str, batch: int, worker: str, n: int, shard: Shard
) -> Any:
    async with conn.transaction():
        # As the dispatcher runs it: with the claim connections' settings (a generic
        # plan, and whatever else database.claim_settings says).
        for name, value in database.claim_settings(shard).items():
            await conn.execute("SELECT set_config($1, $2, true)", name, value)
        arguments = claim_arguments(sql, batch, worker, n)
        return json.loads(await conn.fetchval(EXPLAIN + sql, *arguments))[0]


async def _explain_complete(conn: asyncpg.Connection, rows: Sequence[Any]) -> Any:
    async with conn.transaction():
        return json.loads(
            await conn.fetchval(
                EXPLAIN + leases.COMPLETE_SUCCEEDED,
                [r["id"] for r in rows],
                [r["fencing_token"] for r in rows],
                None,
                None,
                None,
            )
        )[0]


def claim_arguments(sql: str, batch: int, worker: str, n: int) -> tuple[Any, ...]:
    common = ([QUEUE], batch, worker, None, 300.0, None)
    if "$7" not in sql:  # claim_one_head; and the claim before version 5 (no shares)
        return common
    return (*common, [0.0, 0.0, 0.0], [0.7, 0.25, 0.05], n)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.explain")
    parser.add_argument("--plans", action="store_true", help="print one plan of each")
    parser.add_argument("--tenants", type=int, default=10, help="tenants of the ready runs")
    parser.add_argument("--priorities", type=int, default=3, choices=(1, 2, 3))
    parser.add_argument(
        "--batch",
        type=int,
        action="append",
        help="claim batch size, repeatable (default 100)",
    )
    parser.add_argument("--ready", type=int, default=READY, help="ready runs preloaded")
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with harness.server() as url, harness.database(url, DATABASE) as database_url:
        for table in asyncio.run(
            measure(
                database_url,
                options.plans,
                options.tenants,
                options.priorities,
                options.batch or [100],
                options.ready,
            )
        ):
            print(format_table(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
