"""``python -m bench.profile``: on what the Python processes behind the throughput
figures spend their CPU, sampled with py-spy.

``make bench`` gives each figure as a ratio to a raw-SQL loop, and its CPU columns
(``bench.cpu``) say which process spends the difference; this says on what. On a private
PostgreSQL it runs three loads, each for ``--seconds``:

- ``http``: lease + complete through HTTP with the worker SDK, 4 worker processes
  leasing batches of 100 (the (c) row behind ``http_vs_ceiling``); it samples the
  dispatcher and one worker process;
- ``store``: claim (batch 100) + complete straight against one shard (the (b) row
  behind ``store_vs_ceiling``), in a child process it samples;
- ``enqueue``: batch enqueue through HTTP, 1 000 runs a call from 2 clients (the (d) row
  behind ``enqueue_vs_ceiling``); it samples the dispatcher.

py-spy samples each process from outside without pausing it (``--nonblocking``) and
only while a thread holds the GIL (``--gil``), so waiting in the event loop is left out,
as is C code that lets the GIL go (libuv's polling, a socket send). Each sample counts
for the layer of its innermost frame (by the frame's file), and a process's CPU time
per run, metered from ``/proc`` over the same seconds, is shared out among the layers by
their samples. PostgreSQL's side is ``python -m bench.explain``'s: per-row executor
time, buffers and WAL of the same statements.

``--raw DIR`` keeps each process's samples in py-spy's raw format (one stack and its
count a line), which flame graph tools read.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench import Row, Table, cpu, format_table, harness, http, store
from tickwork.core.shards import Shard, ShardMap
from tickwork.store import database

DATABASE: Final = "tickwork_bench_profile"
RATE: Final = 200  # samples per second and process
WORKERS: Final = 4
BATCH: Final = 100
SETTLE: Final = 3.0  # seconds from a load's start to its first sample: spawns, warm-up

# The layer of a frame, by the first fragment found in its file name (in this order).
LAYERS: Final[tuple[tuple[str, str], ...]] = (
    ("tickwork/api/", "tickwork API routes"),
    ("tickwork/engine/", "tickwork engine"),
    ("tickwork/store/", "tickwork store"),
    ("tickwork/worker/", "worker SDK"),
    ("tickwork/core/", "tickwork core"),
    ("tickwork/", "tickwork (other)"),
    # The __init__ that dataclasses generates (records, leases, completions).
    ("<string>", "tickwork records (dataclass __init__)"),
    ("bench/", "the bench's own client code"),
    ("asyncpg/", "PostgreSQL driver (asyncpg)"),
    ("uvicorn/", "HTTP server (uvicorn)"),
    ("httptools", "HTTP server (uvicorn)"),
    ("starlette/", "ASGI framework (Starlette, FastAPI)"),
    ("fastapi/", "ASGI framework (Starlette, FastAPI)"),
    ("pydantic", "validation (pydantic)"),
    ("aiohttp/", "HTTP client (aiohttp)"),
    ("multidict", "HTTP client (aiohttp)"),
    ("yarl/", "HTTP client (aiohttp)"),
    ("prometheus_client/", "metrics (prometheus_client)"),
    ("asyncio/", "event loop"),
    ("uvloop", "event loop"),
    ("selectors.py", "event loop"),
    ("threading.py", "threads"),
    ("queue.py", "threads"),
)
OTHER: Final = "other (standard library, other packages)"
NO_PY_SPY: Final = "python -m bench.profile needs py-spy: pip install py-spy"


def layer_of(frame: str) -> str:
    """The layer of one py-spy frame, ``function (path/file.py:line)``."""
    opening = frame.rfind(" (")
    where = frame[opening + 2 :] if opening >= 0 else frame
    for fragment, layer in LAYERS:
        if fragment in where:
            return layer
    return OTHER


@dataclass(frozen=True)
class Samples:
    """One process's samples: by layer and by innermost function."""

    total: int
    layers: Counter[str]
    functions: Counter[str]


def read_raw(lines: Iterable[str]) -> Samples:
    """py-spy's raw format: ``frame;frame;...;innermost count`` per line."""
    layers: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        n = int(count)
        total += n
        layers[layer_of(frames[-1])] += n
        functions[frames[-1]] += n
    return Samples(total, layers, functions)


def py_spy() -> str | None:
    """The py-spy next to this Python (the virtualenv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextmanager
def sampling(pids: dict[str, int], seconds: float, folder: Path) -> Iterator[dict[str, Path]]:
    """py-spy on each named process for ``seconds``; yields the raw files it will write
    (complete once the block is left)."""
    binary = py_spy()
    if binary is None:
        raise SystemExit(NO_PY_SPY)
    files = {name: folder / f"{name}.txt" for name in pids}
    spies = [
        subprocess.Popen(  # noqa: S603 - py-spy on our own child processes
            [
                binary,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(max(1, round(seconds))),
                "--rate",
                str(RATE),
                "--format",
                "raw",
                "--nonblocking",
                "--gil",
                "--output",
                str(files[name]),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for name, pid in pids.items()
    ]
    try:
        yield files
    finally:
        for spy, name in zip(spies, pids, strict=True):
            _, error = spy.communicate(timeout=seconds + 60)
            if spy.returncode != 0 or not files[name].exists():
                raise SystemExit(
                    f"py-spy could not sample the {name} (it needs ptrace permission on "
                    f"the bench's child processes): {error.decode(errors='replace').strip()}"
                )


def layer_table(
    title: str, profiles: dict[str, Samples], per_run: dict[str, float | None]
) -> Table:
    """One row per layer: each process's share of samples, and of its CPU per run."""
    # Layers in order of their share, summed over the processes.
    weights: dict[str, float] = {}
    for samples in profiles.values():
        for layer, n in samples.layers.items():
            weights[layer] = weights.get(layer, 0.0) + n / max(samples.total, 1)
    rows: list[Row] = []
    for layer in sorted(weights, key=weights.__getitem__, reverse=True):
        row: Row = {"layer": layer}
        for name, samples in profiles.items():
            share = samples.layers[layer] / max(samples.total, 1)
            row[f"{name} %"] = round(share * 100, 1)
            cost = per_run.get(name)
            row[f"{name} us/run"] = None if cost is None else round(share * cost, 1)
        rows.append(row)
    total: Row = {"layer": "total"}
    for name, samples in profiles.items():
        total[f"{name} %"] = 100.0 if samples.total else 0.0
        cost = per_run.get(name)
        total[f"{name} us/run"] = None if cost is None else round(cost, 1)
    rows.append(total)
    counts = ", ".join(f"{name} {samples.total:,}" for name, samples in profiles.items())
    return Table(
        title,
        rows,
        notes=[
            f"samples (while holding the GIL): {counts}",
            "us/run: the process's CPU per run (bench.cpu), shared out by its samples",
            "C extensions show as the Python frame that called them: asyncpg's protocol "
            "under the event loop's read callback, orjson under its caller",
        ],
    )


def function_table(title: str, profiles: dict[str, Samples], top: int) -> Table:
    rows: list[Row] = []
    for name, samples in profiles.items():
        for function, n in samples.functions.most_common(top):
            rows.append(
                {
                    "process": name,
                    "self %": round(n / max(samples.total, 1) * 100, 1),
                    "function (innermost frame)": function[:110],
                }
            )
    return Table(title, rows)


def _keep(files: dict[str, Path], raw: Path | None, load: str) -> None:
    if raw is None:
        return
    raw.mkdir(parents=True, exist_ok=True)
    for name, path in files.items():
        shutil.copyfile(path, raw / f"{load}-{name}.txt")


def _profiles(files: dict[str, Path]) -> dict[str, Samples]:
    found = {}
    for name, path in files.items():
        with path.open() as lines:
            found[name] = read_raw(lines)
    return found


@dataclass(frozen=True)
class Load:
    """What one load measured: runs/s, the raw sample files, and CPU microseconds per
    run by sampled process (``cpu.per_run``, which adds ``CPUs busy``)."""

    rate: float
    files: dict[str, Path]
    per_run: dict[str, float | None]


def http_load(url: str, shard_map: ShardMap, seconds: float, folder: Path) -> Load:
    asyncio.run(http.clear(shard_map))
    asyncio.run(http.preload(shard_map, int(15_000 * (seconds + SETTLE + 5))))
    context = multiprocessing.get_context("spawn")
    with context.Pool(WORKERS) as pool:
        counting = seconds + SETTLE + 2
        pending = pool.map_async(
            http.sdk_process, [(url, BATCH, counting, http.WORKER, http.QUEUE)] * WORKERS
        )
        time.sleep(SETTLE)
        workers = [c.pid for c in multiprocessing.active_children() if c.pid is not None]
        sampled = {"dispatcher": http.DISPATCHERS[url], "worker": workers[0]}
        with cpu.metered(
            {"dispatcher": [http.DISPATCHERS[url]], "workers": list(workers)}, {}
        ) as meter:
            start = time.time()
            with sampling(sampled, seconds, folder) as files:
                time.sleep(seconds)
        results = pending.get(timeout=counting + 60)
    rate = sum(count for count, _began, _ended in results) / counting
    columns = {"dispatcher": "dispatcher", "workers": "worker"}
    return Load(rate, files, cpu.per_run(meter, start, start + seconds, rate, columns))


def _store_child(shard: Shard, runs: int) -> float:
    return asyncio.run(store.drain(shard, BATCH, runs, preload=False)).rate


def store_load(shard: Shard, seconds: float, folder: Path) -> Load:
    runs = int(20_000 * (seconds + SETTLE + 3))
    asyncio.run(_prepare_store(shard, runs))
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        pending = pool.apply_async(_store_child, (shard, runs))
        time.sleep(SETTLE)
        child = multiprocessing.active_children()[0].pid
        assert child is not None
        with cpu.metered({"store": [child]}, {}) as meter:
            start = time.time()
            with sampling({"store": child}, seconds, folder) as files:
                time.sleep(seconds)
        rate = pending.get(timeout=600)
    return Load(rate, files, cpu.per_run(meter, start, start + seconds, rate, {"store": "store"}))


async def _prepare_store(shard: Shard, runs: int) -> None:
    conn = await database.connect(shard)
    try:
        await store.prepare(conn, runs, 1, 1)
    finally:
        await conn.close()


def enqueue_load(url: str, shard_map: ShardMap, seconds: float, folder: Path) -> Load:
    asyncio.run(http.clear(shard_map))
    pid = http.DISPATCHERS[url]

    async def load() -> tuple[float, float, dict[str, Path], cpu.Meter | None]:
        running = asyncio.create_task(http.batch_enqueue(url, seconds + SETTLE + 1))
        await asyncio.sleep(SETTLE)
        with cpu.metered({"dispatcher": [pid]}, {}) as meter:
            start = time.time()
            with sampling({"dispatcher": pid}, seconds, folder) as files:
                await asyncio.sleep(seconds)
        return await running, start, files, meter

    rate, start, files, meter = asyncio.run(load())
    columns = {"dispatcher": "dispatcher"}
    return Load(rate, files, cpu.per_run(meter, start, start + seconds, rate, columns))


LOADS: Final = ("http", "store", "enqueue")


def measure(url: str, loads: Sequence[str], seconds: float, top: int, raw: Path | None) -> None:
    shard_map = asyncio.run(http.migrate(url))
    folder = Path(tempfile.mkdtemp(prefix="tickwork-bench-profile-"))
    try:
        for name in loads:
            started = time.perf_counter()
            if name == "store":
                result = store_load(shard_map.shards[0], seconds, folder)
                what = f"(b) claim + complete through the store, batch {BATCH}, 2 connections"
            else:
                with http.dispatcher(url) as api:
                    if name == "http":
                        result = http_load(api, shard_map, seconds, folder)
                        what = (
                            f"(c) lease + complete through HTTP, {WORKERS} worker processes, "
                            f"lease batch {BATCH}"
                        )
                    else:
                        result = enqueue_load(api, shard_map, seconds, folder)
                        what = "(d) batch enqueue through HTTP, 1 000 runs a call, 2 clients"
            profiles = _profiles(result.files)
            _keep(result.files, raw, name)
            title = f"{name}: {what}, {result.rate:,.0f} runs/s"
            print(format_table(layer_table(title, profiles, result.per_run)))
            print()
            print(format_table(function_table(f"{name}: the busiest functions", profiles, top)))
            print(f"  ({name}: {time.perf_counter() - started:.1f} s)")
            print()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument(
        "--load", action="append", choices=LOADS, help="run only this load (repeatable)"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="sampled seconds per load")
    parser.add_argument("--top", type=int, default=12, help="functions listed per process")
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw samples in this folder")
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if py_spy() is None:
        print(NO_PY_SPY, file=sys.stderr)
        return 2
    if not cpu.available():
        print("python -m bench.profile needs /proc (Linux)", file=sys.stderr)
        return 2
    with harness.server() as url, harness.database(url, DATABASE) as database_url:
        measure(database_url, options.load or LOADS, options.seconds, options.top, options.raw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
