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
import re
import statistics
import time
from typing import Any

import asyncpg

from bench import Context, Row, Table, register
from bench.harness import scaled
from tickwork.core import fairness
from tickwork.store import database, leases

QUEUE = "bench"
BATCH = 100
ROUNDS = 30
PRELOAD = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at)
SELECT 'tenant-' || (i % 10), 'job-' || (i % 50), $2, 1, 'ready', 'api', 3, 30, 1800,
       3600, now(), now(), now(), now()
FROM generate_series(1, $1) AS i
"""
EXPLAIN = "EXPLAIN (ANALYZE, FORMAT JSON) "
AB_ROUNDS = 200
# The marks CTE as the worker path's statements write it, for the variant without.
_MARKS = re.compile(r"\), marked AS \(\n.*?ON CONFLICT DO NOTHING\n\)", re.S)


def unmarked(sql: str) -> str:
    """``sql`` without its changed-jobs marks (the baseline of the A/B measurement)."""
    stripped = _MARKS.sub(")", sql)
    assert "changed_jobs" not in stripped
    return stripped


def claim_args(shares: fairness.PriorityShares) -> tuple[Any, ...]:
    """The claim's parameters: a batch of the bench queue, any tenant, fair shares."""
    return ([QUEUE], BATCH, "bench", None, 300, None, shares.passes, shares.weights, shares.seed())


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
    rounds, ab_rounds = scaled(ROUNDS, least=3), scaled(AB_ROUNDS, least=3)
    try:
        await conn.execute(PRELOAD, BATCH * rounds * 2, QUEUE)
        await conn.execute("VACUUM ANALYZE live_runs")
        rows: list[Row] = []
        shares = fairness.PriorityShares()
        for label, drain_first in (("jobs already marked", False), ("after a drain", True)):
            claim_times: list[tuple[float, float]] = []
            complete_times: list[tuple[float, float]] = []
            for _ in range(rounds):
                if drain_first:
                    await conn.execute("DELETE FROM changed_jobs")
                trial = conn.transaction()
                await trial.start()  # a claim under EXPLAIN ANALYZE, rolled back
                claim_times.append(await _explained(conn, leases.CLAIM, *claim_args(shares)))
                await trial.rollback()
                claimed = await conn.fetch(leases.CLAIM, *claim_args(shares))
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
        ab = await _compare(conn, shares, ab_rounds)
    finally:
        await conn.close()
    return [
        Table(
            f"claim 100 + complete 100, {ab_rounds} rounds each way, alternating "
            "(jobs marked: the steady state between two status passes)",
            ab,
            notes=["µs per run: median round time / 100; the difference is what the marks cost"],
        ),
        Table(
            "changed-jobs marks inside the worker path's statements (median of "
            f"{rounds}, batches of {BATCH} runs over 500 jobs)",
            rows,
            notes=[
                "marks ms: the changed_jobs insert node of the statement's plan",
                "jobs already marked: an index probe per job, no write (ON CONFLICT DO "
                "NOTHING); after a drain: each job's row written once",
            ],
        ),
    ]


async def _round(
    conn: asyncpg.Connection, claim: str, complete: str, args: tuple[Any, ...]
) -> float:
    started = time.perf_counter()
    async with conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode TO force_generic_plan")
        claimed = await conn.fetch(claim, *args)
    await conn.fetch(
        complete,
        [r["id"] for r in claimed],
        [r["fencing_token"] for r in claimed],
        None,
        None,
        None,
    )
    return time.perf_counter() - started


async def _compare(
    conn: asyncpg.Connection, shares: fairness.PriorityShares, rounds: int
) -> list[Row]:
    """``rounds`` claim + complete round trips with the marks and without, interleaved."""
    await conn.execute(PRELOAD, BATCH * rounds * 2 + BATCH * 20, QUEUE)
    await conn.execute("VACUUM ANALYZE live_runs")
    variants = {
        "with marks": (leases.CLAIM, leases.COMPLETE_SUCCEEDED),
        "without marks": (unmarked(leases.CLAIM), unmarked(leases.COMPLETE_SUCCEEDED)),
    }
    timings: dict[str, list[float]] = {name: [] for name in variants}
    for claim, complete in variants.values():  # warm the plans
        for _ in range(10):
            await _round(conn, claim, complete, claim_args(shares))
    for _ in range(rounds):
        for name, (claim, complete) in variants.items():
            timings[name].append(await _round(conn, claim, complete, claim_args(shares)))
    base = statistics.median(timings["without marks"])
    return [
        {
            "variant": name,
            "µs per run": 1e6 * statistics.median(times) / BATCH,
            "vs without %": 100 * (statistics.median(times) / base - 1),
        }
        for name, times in timings.items()
    ]
