"""``python -m bench.floor``: what each part of a run's row costs PostgreSQL.

The raw loop (bench.ceiling) claims and completes a narrow row with one index; a
tickwork run is leased by the one-head claim (the plain path's statement when one
tenant's runs are ready) and moved to the history when it succeeds. This runs both on
one shard, one batch of 100 after another on one connection, and takes the CPU time
of that connection's backend process per row (from ``/proc/<pid>/schedstat``: the
nanoseconds it ran, nothing from the server's background processes, the client or
the other backends). Then it takes tickwork's statements apart, one cost at a time:

- ``without job marks``: the claim and the completion without their ``changed_jobs``
  inserts (what the operator's status pass drains);
- ``one plain statement each``: a claim without the fairness stages (one ``SKIP
  LOCKED`` pick and the update, answering the columns the narrow claim answers) and
  the completion reduced to its move, no marks;
- ``narrow rows``: those two on copies of ``live_runs`` and ``finished_runs`` holding
  only the columns claim and complete touch, with the indexes the claim and the move
  write to;
- ``narrow, no lease index``: that, without the index of leased runs by job;
- ``narrow, no lease nor history index``: that, with a history table without
  indexes or partitions.

Each variant starts from the same fill (freshly vacuumed); the figures are medians over
``--rounds`` rounds, so that the noise of a shared machine shows as their spread
(printed) rather than in one number. Linux only (schedstat).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import asyncpg

from bench import Context, Table, ceiling, format_table, harness, register
from bench.explain import FILL_FINISHED
from tickwork.core.shards import ShardMap
from tickwork.store import database, leases, migrate

DATABASE: Final = "tickwork_bench_floor"
BATCH: Final = 100
QUEUE: Final = "default"
READY: Final = 100_000
FINISHED: Final = 100_000
JOBS: Final = 50
ROUNDS: Final = 3
BATCHES: Final = 400

# Ready runs of one tenant and one priority, spread over $2 jobs.
FILL_READY: Final = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at)
SELECT 'tenant-0', 'job-' || (i % $2), 'default', 1, 'ready', 'api', 3, 30, 1800, 3600,
       now(), now() - make_interval(secs => $1 - i), now(), now()
FROM generate_series(1, $1) AS i
"""

# Copies of the hot tables with only what claim and complete read and write; the
# claimable, not-leased-by-job and leased-by-job indexes of live_runs, and the history's
# two (by job, by id) on a table partitioned like finished_runs.
NARROW_SETUP: Final = """
DROP TABLE IF EXISTS floor_live, floor_live_bare, floor_finished, floor_finished_bare;
CREATE TABLE floor_live (
    id bigint PRIMARY KEY, tenant text NOT NULL, job text NOT NULL, queue text NOT NULL,
    priority smallint NOT NULL, state text NOT NULL, attempt integer NOT NULL,
    ready_at timestamptz NOT NULL, timeout_seconds integer NOT NULL,
    fencing_token bigint, lease_owner text, leased_at timestamptz,
    lease_expires_at timestamptz, deadline timestamptz,
    cancel_requested boolean NOT NULL DEFAULT false,
    concurrency integer NOT NULL DEFAULT 0, updated_at timestamptz NOT NULL
) WITH (fillfactor = 80);
CREATE INDEX ON floor_live (queue, priority, tenant, ready_at, id)
    WHERE state = 'ready' AND concurrency = 0;
CREATE INDEX ON floor_live (tenant, job, id DESC) WHERE state <> 'leased';
CREATE INDEX ON floor_live (tenant, job, id DESC) WHERE state = 'leased';
CREATE TABLE floor_live_bare (LIKE floor_live INCLUDING DEFAULTS) WITH (fillfactor = 80);
ALTER TABLE floor_live_bare ADD PRIMARY KEY (id);
CREATE INDEX ON floor_live_bare (queue, priority, tenant, ready_at, id)
    WHERE state = 'ready' AND concurrency = 0;
CREATE INDEX ON floor_live_bare (tenant, job, id DESC) WHERE state <> 'leased';
CREATE TABLE floor_finished (
    id bigint NOT NULL, tenant text NOT NULL, job text NOT NULL, state text NOT NULL,
    attempt integer NOT NULL, fencing_token bigint, lease_owner text,
    leased_at timestamptz, finished_at timestamptz NOT NULL
) PARTITION BY RANGE (finished_at);
CREATE TABLE floor_finished_default PARTITION OF floor_finished DEFAULT;
CREATE INDEX ON floor_finished (tenant, job, id DESC);
CREATE INDEX ON floor_finished (id);
CREATE TABLE floor_finished_bare (LIKE floor_finished);
INSERT INTO floor_live
SELECT id, tenant, job, queue, priority, state, attempt, ready_at, timeout_seconds,
       NULL, NULL, NULL, NULL, NULL, false, 0, updated_at
FROM live_runs;
INSERT INTO floor_live_bare SELECT * FROM floor_live;
"""
NARROW_CLAIM: Final = """
WITH picked AS (
    SELECT r.id FROM {live} AS r
    WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = $1
    ORDER BY r.priority, r.tenant, r.ready_at, r.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), clock AS (
    SELECT now() AS now
)
UPDATE {live} AS r
SET state = 'leased',
    attempt = r.attempt + 1,
    fencing_token = nextval('fencing_tokens'),
    lease_owner = $3,
    leased_at = clock.now,
    deadline = clock.now + make_interval(secs => r.timeout_seconds),
    lease_expires_at = least(clock.now + make_interval(secs => $4::double precision),
                             clock.now + make_interval(secs => r.timeout_seconds)),
    updated_at = clock.now
FROM clock
WHERE r.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING r.id, r.tenant, r.job, r.queue, r.priority, r.attempt, r.fencing_token,
          r.ready_at, r.leased_at, r.lease_expires_at, r.deadline, r.concurrency
"""
NARROW_COMPLETE: Final = """
WITH done AS (
    DELETE FROM {live} AS r
    WHERE r.id = ANY($1::bigint[])
      AND r.fencing_token = ($2::bigint[])[array_position($1::bigint[], r.id)]
      AND r.state = 'leased'
    RETURNING r.*
), moved AS (
    INSERT INTO {finished}
    SELECT id, tenant, job, CASE WHEN cancel_requested THEN 'cancelled' ELSE 'succeeded' END,
           attempt, fencing_token, lease_owner, leased_at, now()
    FROM done
    RETURNING id, fencing_token, state
)
SELECT id AS run_id, fencing_token, state AS result_state FROM moved
"""

Rows = list[asyncpg.Record]
Claim = Callable[[asyncpg.Connection, int], Awaitable[Rows]]
Complete = Callable[[asyncpg.Connection, Rows], Awaitable[object]]


@dataclass(frozen=True)
class Variant:
    name: str
    claim: Claim
    complete: Complete
    # The raw loop runs on a plain connection (a generic plan would scan its table).
    plain: bool = False


def without_cte(sql: str, name: str) -> str:
    """``sql`` without its common table expression ``name`` (``, name AS (...)``)."""
    start = re.search(rf",\s*{name} AS \(", sql)
    if start is None:
        raise ValueError(f"no CTE {name!r} in the statement")
    depth, at = 0, start.end() - 1
    for at in range(start.end() - 1, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[at], 0)
        if depth == 0:
            break
    return sql[: start.start()] + sql[at + 1 :]


def _tickwork_claim(sql: str) -> Claim:
    async def claim(conn: asyncpg.Connection, n: int) -> Rows:
        rows = await conn.fetch(sql, [QUEUE], BATCH, f"floor-{n}", None, 300.0, None)
        return [row for row in rows if row["id"] is not None]

    return claim


def _leases(rows: Rows) -> tuple[list[int], list[int]]:
    return [r["id"] for r in rows], [r["fencing_token"] for r in rows]


def _tickwork_complete(sql: str) -> Complete:
    async def complete(conn: asyncpg.Connection, rows: Rows) -> object:
        return await conn.execute(sql, *_leases(rows), None, None, None)

    return complete


def _narrow(live: str, finished: str) -> tuple[Claim, Complete]:
    claim_sql = NARROW_CLAIM.format(live=live)
    complete_sql = NARROW_COMPLETE.format(live=live, finished=finished)

    async def claim(conn: asyncpg.Connection, n: int) -> Rows:
        return list(await conn.fetch(claim_sql, QUEUE, BATCH, f"floor-{n}", 300.0))

    async def complete(conn: asyncpg.Connection, rows: Rows) -> object:
        return await conn.execute(complete_sql, *_leases(rows))

    return claim, complete


async def _raw_claim(conn: asyncpg.Connection, _n: int) -> Rows:
    return list(await conn.fetch(ceiling.CLAIM, BATCH))


async def _raw_complete(conn: asyncpg.Connection, rows: Rows) -> object:
    return await conn.execute(ceiling.COMPLETE, [r["id"] for r in rows], [r["token"] for r in rows])


def _plain_move() -> Complete:
    """complete_succeeded reduced to the move (no marks, no cancelled attempt, no
    streak reset)."""
    sql = leases.COMPLETE_SUCCEEDED
    for name in ("marked", "recorded", "reset"):
        sql = without_cte(sql, name)
    return _tickwork_complete(sql)


def variants() -> list[Variant]:
    unmarked_claim = without_cte(leases.CLAIM_ONE_HEAD, "marked")
    unmarked_complete = without_cte(leases.COMPLETE_SUCCEEDED, "marked")
    plain_claim, _ = _narrow("live_runs", "finished_runs")
    return [
        Variant("raw loop (bench.ceiling)", _raw_claim, _raw_complete, plain=True),
        Variant(
            "tickwork (claim_one_head, complete_succeeded)",
            _tickwork_claim(leases.CLAIM_ONE_HEAD),
            _tickwork_complete(leases.COMPLETE_SUCCEEDED),
        ),
        Variant(
            "  without job marks",
            _tickwork_claim(unmarked_claim),
            _tickwork_complete(unmarked_complete),
        ),
        Variant("  one plain statement each, no marks", plain_claim, _plain_move()),
        Variant("  the same on narrow rows", *_narrow("floor_live", "floor_finished")),
        Variant("  narrow, no lease index", *_narrow("floor_live_bare", "floor_finished")),
        Variant(
            "  narrow, no lease nor history index",
            *_narrow("floor_live_bare", "floor_finished_bare"),
        ),
    ]


def _measurable() -> bool:
    return Path("/proc/self/schedstat").exists()


def _cpu_seconds(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


async def _fill(conn: asyncpg.Connection, ready: int, finished: int, jobs: int) -> None:
    await conn.execute("TRUNCATE live_runs, finished_runs, attempts, changed_jobs, run_keys")
    await conn.execute(FILL_FINISHED["live_runs"], finished)
    await conn.execute(FILL_READY, ready, jobs)
    await conn.execute(ceiling.SETUP)
    await conn.execute(ceiling.FILL, ready)
    await conn.execute(NARROW_SETUP)
    await conn.execute("VACUUM ANALYZE")
    await conn.execute("CHECKPOINT")


async def _run(conn: asyncpg.Connection, variant: Variant, batches: int) -> tuple[float, float]:
    """CPU microseconds per row of the claims and of the completions."""
    pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    claimed = completed = 0.0
    rows_done = 0
    for n in range(batches):
        before = _cpu_seconds(pid)
        rows = await variant.claim(conn, n)
        between = _cpu_seconds(pid)
        await variant.complete(conn, rows)
        after = _cpu_seconds(pid)
        claimed += between - before
        completed += after - between
        rows_done += len(rows)
    if rows_done < batches * BATCH:
        raise RuntimeError(f"{variant.name}: {rows_done} rows of {batches * BATCH} claimed")
    return claimed / rows_done * 1e6, completed / rows_done * 1e6


async def measure(
    url: str,
    rounds: int,
    batches: int,
    *,
    ready: int = READY,
    finished: int = FINISHED,
    jobs: int = JOBS,
) -> Table:
    shard_map = ShardMap.from_dsns([url], 1)
    await migrate.migrate_all(shard_map.shards)
    shard = shard_map.shards[0]
    admin = await database.connect(shard)
    plain = await asyncpg.connect(url)
    # As the dispatcher runs them: a generic plan, and the claim connections' settings.
    claims = await database.connect(shard, claims=True)
    figures: dict[str, list[tuple[float, float]]] = {}
    chosen = variants()
    try:
        for round_ in range(rounds):
            for variant in chosen:
                await _fill(admin, ready, finished, jobs)
                conn = plain if variant.plain else claims
                figures.setdefault(variant.name, []).append(await _run(conn, variant, batches))
            print(f"round {round_ + 1} of {rounds} done", file=sys.stderr, flush=True)
    finally:
        for conn in (admin, plain, claims):
            await conn.close()
    raw = statistics.median(c + d for c, d in figures[chosen[0].name])
    rows = []
    for variant in chosen:
        totals = [c + d for c, d in figures[variant.name]]
        total = statistics.median(totals)
        rows.append(
            {
                "statements": variant.name,
                "claim us/row": round(statistics.median(c for c, _ in figures[variant.name]), 1),
                "complete us/row": round(statistics.median(d for _, d in figures[variant.name]), 1),
                "total us/row": round(total, 1),
                "spread": f"{min(totals):.1f}-{max(totals):.1f}",
                "vs raw": round(total / raw, 2),
            }
        )
    return Table(
        f"CPU of the backend per row, claim + complete, batch {BATCH}: {ready:,} ready runs "
        f"of one tenant's {jobs} jobs, {finished:,} finished, medians of {rounds} rounds of "
        f"{batches * BATCH:,} rows",
        rows,
        notes=[
            "the backend process alone (/proc schedstat): the server's background "
            "processes (WAL writer, autovacuum) are the bench's figure (c), not this one",
            "narrow rows: the claimed and moved row holds 17 and 9 columns instead of 36 "
            "and 29, with the same indexes",
        ],
    )


@register("floor", "what each part of a run's row costs PostgreSQL, per row", default=False)
async def floor_case(context: Context) -> list[Table]:
    if not _measurable():
        return []
    if context.smoke:
        return [await measure(context.database_url, 1, 2, ready=1_000, finished=1_000)]
    return [await measure(context.database_url, ROUNDS, BATCHES)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of every variant")
    parser.add_argument("--batches", type=int, default=BATCHES, help="batches of 100 a round")
    parser.add_argument(
        "--jobs", type=int, default=JOBS, help="jobs the ready runs belong to (the marks per batch)"
    )
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not _measurable():
        print("bench.floor reads /proc/<pid>/schedstat: Linux only", file=sys.stderr)
        return 2
    with harness.server() as url, harness.database(url, DATABASE) as database_url:
        table = asyncio.run(
            measure(database_url, options.rounds, options.batches, jobs=options.jobs)
        )
        print(format_table(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
