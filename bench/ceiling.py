"""The raw-SQL baselines every tickwork figure is divided by.

``claim_complete``: the tightest asyncpg loop of claim (``FOR UPDATE SKIP LOCKED``,
batch 100) + complete (``WHERE id = ANY($1) AND token = ANY($2)``) on a minimal table
(id, priority, ready time, state, token, payload) with one partial index, two
connections. ``enqueue``: ``INSERT … SELECT unnest`` of 1 000 rows per statement into
the same table. Both run in a schema of their own in the case's database, so they share
the server, its settings and its load with the figure they are the baseline of; each
ratio case measures its baseline right before its own figure.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Final

import asyncpg
import orjson

from bench import Context, Table, cpu, register

SCHEMA: Final = "ceiling"
BATCH: Final = 100
CONNECTIONS: Final = 2
ENQUEUE_BATCH: Final = 1000

SETUP: Final = """
DROP SCHEMA IF EXISTS ceiling CASCADE;
CREATE SCHEMA ceiling;
CREATE TABLE ceiling.q (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    priority  smallint NOT NULL,
    ready_at  timestamptz NOT NULL,
    state     smallint NOT NULL,
    token     bigint,
    payload   jsonb
);
CREATE INDEX q_ready ON ceiling.q (priority, ready_at, id) WHERE state = 0;
CREATE SEQUENCE ceiling.tokens;
"""
FILL: Final = """
INSERT INTO ceiling.q (priority, ready_at, state)
SELECT 1, now(), 0 FROM generate_series(1, $1)
"""
CLAIM: Final = """
WITH c AS (
    SELECT id FROM ceiling.q WHERE state = 0
    ORDER BY priority, ready_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE ceiling.q AS q SET state = 1, token = nextval('ceiling.tokens')
FROM c WHERE q.id = c.id
RETURNING q.id, q.token
"""
COMPLETE: Final = "UPDATE ceiling.q SET state = 2 WHERE id = ANY($1) AND token = ANY($2)"
ENQUEUE: Final = """
INSERT INTO ceiling.q (priority, ready_at, state, payload)
SELECT 1, now(), 0, p FROM unnest($1::jsonb[]) AS p
"""


async def claim_complete(url: str, seconds: float) -> float:
    """Runs/s of the raw loop, over a table filled to last about ``seconds``."""
    rate, _start, _end = await claim_complete_window(url, seconds)
    return rate


async def claim_complete_window(url: str, seconds: float) -> tuple[float, float, float]:
    """``claim_complete``'s rate, and the wall-clock times (``time.time()``) its loops
    ran between, setup left out (for ``bench.cpu``)."""
    setup = await asyncpg.connect(url)
    try:
        await setup.execute(SETUP)
        await setup.execute(FILL, int(60_000 * seconds))
        await setup.execute("VACUUM ANALYZE ceiling.q")
    finally:
        await setup.close()

    async def loop(deadline: float) -> int:
        conn = await asyncpg.connect(url)
        done = 0
        try:
            while time.perf_counter() < deadline:
                rows = await conn.fetch(CLAIM, BATCH)
                if not rows:
                    break
                await conn.execute(COMPLETE, [r["id"] for r in rows], [r["token"] for r in rows])
                done += len(rows)
        finally:
            await conn.close()
        return done

    began = time.time()
    started = time.perf_counter()
    counts = await asyncio.gather(*(loop(started + seconds) for _ in range(CONNECTIONS)))
    return sum(counts) / (time.perf_counter() - started), began, time.time()


async def claim_complete_metered(
    url: str, seconds: float, postgres: int | None
) -> tuple[float, float | None]:
    """``claim_complete``'s rate, and PostgreSQL's CPU microseconds per run under it
    (``postgres``: its postmaster's PID, see ``bench.cpu``; None where not measured)."""
    with cpu.metered({"postgres": [postgres]}, {"bench": os.getpid()}) as meter:
        rate, start, end = await claim_complete_window(url, seconds)
    return rate, cpu.per_run(meter, start, end, rate, {"postgres": "PG"})["PG"]


async def enqueue(url: str, seconds: float, connections: int = 2) -> float:
    """Rows/s of ``INSERT … SELECT unnest`` in statements of 1 000 rows."""
    setup = await asyncpg.connect(url)
    try:
        await setup.execute(SETUP)
    finally:
        await setup.close()
    payloads = [orjson.dumps({"n": n}).decode() for n in range(ENQUEUE_BATCH)]

    async def loop(deadline: float) -> int:
        conn = await asyncpg.connect(url)
        done = 0
        try:
            while time.perf_counter() < deadline:
                await conn.execute(ENQUEUE, payloads)
                done += ENQUEUE_BATCH
        finally:
            await conn.close()
        return done

    started = time.perf_counter()
    counts = await asyncio.gather(*(loop(started + seconds) for _ in range(connections)))
    return sum(counts) / (time.perf_counter() - started)


async def commit_latency(url: str, samples: int = 200, pause: float = 0.0) -> list[float]:
    """Seconds per one-row INSERT committed on its own: the floor of any wake-up (an
    enqueue and a claim each wait for one WAL flush); with ``pause``, each sent after
    that many seconds of quiet, as from an idle client."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SETUP)
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            await conn.execute(
                "INSERT INTO ceiling.q (priority, ready_at, state) VALUES (1, now(), 0)"
            )
            times.append(time.perf_counter() - started)
            if pause:
                await asyncio.sleep(pause)
        return times
    finally:
        await conn.close()


@register("ceiling", "(a) the raw-SQL baselines: claim+complete and enqueue, no tickwork")
async def ceiling_case(context: Context) -> list[Table]:
    rate = await claim_complete(context.database_url, context.seconds)
    enqueued = await enqueue(context.database_url, context.seconds)
    context.figures["ceiling_runs_per_s"] = round(rate)
    context.figures["ceiling_enqueue_runs_per_s"] = round(enqueued)
    return [
        Table(
            "(a) ceiling: raw asyncpg on a minimal table, 2 connections",
            [
                {"loop": f"claim (batch {BATCH}) + complete (= ANY)", "runs/s": round(rate)},
                {
                    "loop": f"INSERT ... SELECT unnest ({ENQUEUE_BATCH} rows)",
                    "runs/s": round(enqueued),
                },
            ],
        )
    ]
