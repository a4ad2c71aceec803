"""Lease + complete throughput through HTTP, next to the same loop run directly
against the store on the same database, in the same run.

The API runs as a separate ``tickwork dispatcher`` process; workers are 1 or 4
processes, each a single aiohttp session looping lease(max=batch) → complete
(``/v1/runs/{id}/complete`` for batch 1, ``/v1/runs:complete`` otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import Context, Table, register
from tickwork.core.records import Completion, Outcome
from tickwork.core.shards import ShardMap
from tickwork.store import database, leases

SHARDS = 4
QUEUE = "bench"
PRELOAD_SQL = """
INSERT INTO runs (tenant, job, queue, priority, state, origin, max_attempts, retry_base,
                  retry_max, timeout_seconds, due_at, ready_at, created_at, updated_at)
SELECT 'bench', 'job-' || (g % 100), $2, 1, 'ready', 'api', 3, 1, 10, 3600,
       now(), now(), now(), now()
FROM generate_series(1, $1) AS g
"""
CLEAR_SQL = "DELETE FROM runs WHERE queue = $1"


async def preload(shard_map: ShardMap, runs: int) -> None:
    per_shard = runs // shard_map.count + 1
    for shard in shard_map.shards:
        conn = await database.connect(shard)
        try:
            await conn.execute(CLEAR_SQL, QUEUE)
            await conn.execute("TRUNCATE attempts")
            await conn.execute(PRELOAD_SQL, per_shard, QUEUE)
            await conn.execute("VACUUM ANALYZE runs")
        finally:
            await conn.close()


async def store_loop(
    shard_map: ShardMap, batch: int, seconds: float, connections: int = 2
) -> float:
    """The ceiling: claim + complete straight against the store, no HTTP."""

    async def one(worker: int) -> int:
        conns = [await database.connect(s) for s in shard_map.shards]
        done = 0
        deadline = time.perf_counter() + seconds
        shard = worker
        try:
            while time.perf_counter() < deadline:
                shard = (shard + 1) % shard_map.count
                conn = conns[shard]
                got = await leases.claim(conn, shard, [QUEUE], batch, f"w{worker}", 60)
                if not got:
                    continue
                await leases.complete(
                    conn,
                    shard,
                    [Completion(lease.id, lease.fencing_token, Outcome.succeeded) for lease in got],
                )
                done += len(got)
        finally:
            for conn in conns:
                await conn.close()
        return done

    start = time.perf_counter()
    counts = await asyncio.gather(*(one(w) for w in range(connections)))
    return sum(counts) / (time.perf_counter() - start)


async def _http_worker(url: str, token: str, batch: int, seconds: float) -> int:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    lease_body = orjson.dumps({"queues": [QUEUE], "max": batch, "leaseSeconds": 60})
    done = 0
    async with aiohttp.ClientSession(headers=headers) as session:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            async with session.post(url + "/v1/lease", data=lease_body) as response:
                granted = orjson.loads(await response.read())["leases"]
            if not granted:
                continue
            if batch == 1:
                lease = granted[0]
                body = orjson.dumps({"fencingToken": lease["fencingToken"], "outcome": "succeeded"})
                async with session.post(
                    f"{url}/v1/runs/{lease['runId']}/complete", data=body
                ) as response:
                    await response.read()
            else:
                items = [
                    {"runId": g["runId"], "fencingToken": g["fencingToken"], "outcome": "succeeded"}
                    for g in granted
                ]
                async with session.post(
                    url + "/v1/runs:complete", data=orjson.dumps({"items": items})
                ) as response:
                    await response.read()
            done += len(granted)
    return done


def _worker_process(args: tuple[str, str, int, float]) -> int:
    return asyncio.run(_http_worker(*args))


def http_rate(url: str, token: str, batch: int, processes: int, seconds: float) -> float:
    # Each worker times its own loop, so process start-up is not counted.
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        counts = pool.map(_worker_process, [(url, token, batch, seconds)] * processes)
    return sum(counts) / seconds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def dispatcher(database_url: str, token: str) -> Iterator[str]:
    """A ``tickwork dispatcher`` process on 127.0.0.1; yields its URL."""
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-"))
    tokens = folder / "tokens.yaml"
    tokens.write_text(f'- {{token: "{token}", tenant: bench, role: worker, queues: ["{QUEUE}"]}}\n')
    port = _free_port()
    process = subprocess.Popen(  # noqa: S603 - our own CLI
        [
            sys.executable,
            "-m",
            "tickwork",
            "dispatcher",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--shards",
            str(SHARDS),
            "--tokens",
            str(tokens),
        ],
        env={**os.environ, "TICKWORK_DATABASE_URL": database_url, "TICKWORK_LOG_LEVEL": "WARNING"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the dispatcher did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


async def migrate(database_url: str) -> ShardMap:
    from tickwork.store import migrate as migrations

    shard_map = ShardMap.from_dsns([database_url], SHARDS)
    await migrations.migrate_all(shard_map.shards)
    return shard_map


def run(database_url: str, seconds: float = 4.0) -> list[dict[str, Any]]:
    """Rows: batch, worker processes, HTTP runs/s, store runs/s, ratio."""
    shard_map = asyncio.run(migrate(database_url))
    rows: list[dict[str, Any]] = []
    token = secrets.token_urlsafe(24)
    with dispatcher(database_url, token) as url:
        for batch in (1, 100):
            asyncio.run(preload(shard_map, 400_000 if batch > 1 else 40_000))
            store = asyncio.run(store_loop(shard_map, batch, seconds))
            for processes in (1, 4):
                asyncio.run(preload(shard_map, 400_000 if batch > 1 else 40_000))
                rate = http_rate(url, token, batch, processes, seconds)
                rows.append(
                    {
                        "batch": batch,
                        "workers": processes,
                        "http runs/s": round(rate),
                        "store runs/s": round(store),
                        "http/store": round(rate / store, 2),
                    }
                )
    return rows


@register("http", "lease + complete through HTTP (1 and 4 worker processes) vs the store")
def http_case(context: Context) -> list[Table]:
    rows = run(context.database_url, context.seconds)
    return [
        Table(
            "lease + complete through HTTP vs straight against the store (4 shards)",
            rows,
            notes=[
                "HTTP: a `tickwork dispatcher` process; each worker process loops "
                "lease(max=batch) -> complete (batch endpoint when batch > 1)",
                "store: the same loop in-process with 2 connections, no HTTP",
            ],
        )
    ]
