"""What the operator's change marks cost the worker path.

Every statement that changes runs adds their jobs to ``changed_jobs`` with ``ON CONFLICT
DO NOTHING``. This case runs the real claim and complete statements (batches of 100
over 500 jobs, as in the store case) under ``EXPLAIN (ANALYZE)`` and reports the time
spent in the ``changed_jobs`` insert node against the whole statement: with the jobs
already marked (the steady state between two status passes: an index probe per job,
nothing written) and right after a drain (the first change of each job writes its
row).
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import asyncpg

from bench import Context, Row, Table, register
from tickwork.store import database, leases

QUEUE = "bench"
BATCH = 100
ROUNDS = 30
PRELOAD = """
INSERT INTO runs (tenant, job, queue, priority, state, origin, max_attempts, retry_base,
                  retry_max, timeout_seconds, due_at, ready_at, created_at, updated_at)
SELECT 'tenant-' || (i % 10), 'job-' || (i % 50), $2, 1, 'ready', 'api', 3, 30, 1800,
       3600, now(), now(), now(), now()
FROM generate_series(1, $1) AS i
"""
EXPLAIN = "EXPLAIN (ANALYZE, FORMAT JSON) "


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


def _timing(text: str) -> tuple[float, float]:
    """(statement ms, ms in the changed_jobs insert) of an EXPLAIN ANALYZE result."""
    (result,) = json.loads(text)
    marks = sum(
        node["Actual Total Time"] * node.get("Actual Loops", 1)
        for node in _nodes(result["Plan"])
        if node.get("Node Type") == "ModifyTable" and node.get("Relation Name") == "changed_jobs"
    )
    return float(result["Execution Time"]), float(marks)


async def _explained(conn: asyncpg.Connection, sql: str, *args: Any) -> tuple[float, float]:
    text = await conn.fetchval(EXPLAIN + sql, *args)
    return _timing(text if isinstance(text, str) else json.dumps(text))


@register("status-feed", "what the changed-jobs marks cost claim and complete")
async def marks(context: Context) -> list[Table]:
    shard_map = await context.migrate(1)
    conn = await database.connect(shard_map[0])
    try:
        await conn.execute(PRELOAD, BATCH * ROUNDS * 2, QUEUE)
        await conn.execute("VACUUM ANALYZE runs")
        rows: list[Row] = []
        for label, drain_first in (("jobs already marked", False), ("after a drain", True)):
            claim_times: list[tuple[float, float]] = []
            complete_times: list[tuple[float, float]] = []
            for _ in range(ROUNDS):
                if drain_first:
                    await conn.execute("DELETE FROM changed_jobs")
                trial = conn.transaction()
                await trial.start()  # a claim under EXPLAIN ANALYZE, rolled back
                claim_times.append(
                    await _explained(conn, leases.CLAIM, [QUEUE], BATCH, "bench", None, 300, None)
                )
                await trial.rollback()
                claimed = await conn.fetch(leases.CLAIM, [QUEUE], BATCH, "bench", None, 300, None)
                ids = [r["id"] for r in claimed]
                tokens = [r["fencing_token"] for r in claimed]
                if drain_first:
                    await conn.execute("DELETE FROM changed_jobs")
                complete_times.append(
                    await _explained(conn, leases.COMPLETE_SUCCEEDED, ids, tokens, None, None, None)
                )
            for statement, times in (("claim 100", claim_times), ("complete 100", complete_times)):
                total = statistics.median(t for t, _ in times)
                mark = statistics.median(m for _, m in times)
                rows.append(
                    {
                        "statement": statement,
                        "case": label,
                        "statement ms": total,
                        "marks ms": mark,
                        "marks share %": 100 * mark / total if total else 0.0,
                    }
                )
    finally:
        await conn.close()
    return [
        Table(
            "changed-jobs marks inside the worker path's statements (median of "
            f"{ROUNDS}, batches of {BATCH} runs over 500 jobs)",
            rows,
            notes=[
                "marks ms: the changed_jobs insert node of the statement's plan",
                "jobs already marked: an index probe per job, no write (ON CONFLICT DO "
                "NOTHING); after a drain: each job's row written once",
            ],
        )
    ]
