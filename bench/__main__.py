"""``python -m bench [--only NAME] [--seconds S] [--smoke] [--list]``: run the benchmark cases.

Each case gets a database of its own, created empty and dropped afterwards, on the
server ``bench.harness`` provides (a private PostgreSQL, or the one
``TICKWORK_BENCH_DATABASE_URL`` names). ``--smoke`` checks that the cases run rather
than measuring them: every case (or the ``--only`` ones; one that takes another's
measurements alone runs within that one) at the smallest size, with
short measurements and no settling waits; it prints the tables and writes no figures.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import operator
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from bench import CASES, Case, CaseResult, Context, Table, format_table, harness

# Modules whose import registers their cases, in the order they run.
MODULES: tuple[str, ...] = (
    "bench.ceiling",
    "bench.store",
    "bench.http",
    "bench.spike",
    "bench.materialiser",
    "bench.dashboard",
    "bench.status_feed",
    "bench.bulk",
    "bench.floor",
    "bench.faults",
)
RESULTS = Path(__file__).resolve().parent.parent / "bench-results.json"
# The headline figures, in the order of the summary, with what each is compared to.
SUMMARY: tuple[tuple[str, str, str], ...] = (
    ("ceiling_runs_per_s", "(a) raw claim+complete loop, runs/s", ""),
    ("store_runs_per_s", "(b) through the store in-process, runs/s", ""),
    ("store_vs_ceiling", "(b) store / ceiling", ">= 0.7"),
    ("store_fair_vs_ceiling", "(b) store, 5 tenants x 3 priorities / ceiling", ""),
    ("http_runs_per_s", "(c) HTTP + worker SDK, 4 processes, batch 100, runs/s", ""),
    ("http_vs_ceiling", "(c) HTTP / ceiling", ">= 0.6"),
    ("http_worker_us_per_run", "(c) worker SDK CPU per run, us", "<= 40"),
    ("http_dispatcher_us_per_run", "(c) dispatcher CPU per run, us", "<= 40"),
    ("http_pg_us_per_run", "(c) PostgreSQL CPU per run, us", ""),
    ("http_pg_vs_ceiling_pg", "(c) PostgreSQL CPU per run / the raw loop's", "<= 1.5"),
    ("enqueue_runs_per_s", "(d) HTTP batch enqueue, runs/s", ""),
    ("enqueue_vs_ceiling", "(d) HTTP batch enqueue / INSERT ... unnest", ">= 0.5"),
    ("wakeup_p50_ms", "(e) idle wake-up p50, ms", ""),
    ("wakeup_p99_ms", "(e) idle wake-up p99, ms", ""),
    ("bare_wakeup_p99_ms", "(e) bare LISTEN/NOTIFY long-poll p99, ms", ""),
    ("wakeup_p99_vs_bare", "(e) wake-up p99 / the bare path's", "<= 2"),
    ("commit_p99_ms", "(e) baseline: one-row INSERT + COMMIT p99, ms", ""),
    ("idle_http_p50_ms", "(e) reference: an HTTP round trip from idle p50, ms", ""),
    ("wakeup_shape_p50_ms", "(e) bare + that round trip + a commit from idle, p50s, ms", ""),
    ("wakeup_p50_vs_shape", "(e) wake-up p50 / that least of its shape", ""),
    ("critical_p99_start_lag_s", "(f) critical p99 start lag at 80 % load, s", "< 1"),
    ("default_p99_start_lag_s", "(f) default p99 start lag at 80 % load, s", ""),
    ("bulk_p99_start_lag_s", "(f) bulk p99 start lag at 80 % load, s", "< 60"),
    ("fairness_b_p99_lag_s", "(g) tenant B p99 start lag under A's flood, s", "< 1"),
    ("fairness_b_p99_lag_no_flood_s", "(g) tenant B p99 start lag, no flood, s", ""),
    ("fairness_b_vs_no_flood", "(g) B's lag with / without the flood", "<= 1.2"),
    (
        "bulk_other_tenant_p99_start_lag_s",
        "(i) other tenant's p99 start lag during a bulk replay, s",
        "< 1",
    ),
    ("bulk_replay_runs_per_s", "(i) bulk replay of 50 000 dead runs, runs/s", ""),
    ("spike_all_leased_s", "(h) 100k cron runs at one minute: all leased after, s", "<= 65"),
    ("hung_shard_enqueue_p99_ms", "(j) enqueue p99 with one shard hung, ms", ""),
    ("hung_shard_lease_p99_ms", "(j) lease p99 with one shard hung, ms", ""),
    # readiness_timeout_seconds (1 s) bounds the wait for the hung shard's answer.
    ("hung_shard_readyz_p99_ms", "(j) /readyz p99 with one shard hung, ms", "<= 1100"),
    ("healed_shard_leased_after_s", "(j) a healed shard's run leased after, s", ""),
)
# How a target reads: the comparison, then the bound.
COMPARISONS: Final[dict[str, Callable[[float, float], bool]]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}

SECONDS: Final = 4.0
# Small enough that no case's work outweighs the starting of its processes (dispatcher,
# scheduler, workers), large enough that each still has runs, definitions and samples.
SMOKE_SCALE: Final = 0.001
SMOKE_SECONDS: Final = 0.5


def database_name(case: Case) -> str:
    """The case's database: the PID keeps two bench runs on one server apart."""
    return f"tickwork_bench_{case.name.replace('-', '_')}_{os.getpid()}"


def run_case(case: Case, context: Context) -> CaseResult:
    result = case.run(context)
    if inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> CaseResult:
    result: CaseResult = await awaitable
    return result


def run_and_print(
    case: Case, url: str, seconds: float, figures: dict[str, float], *, smoke: bool
) -> bool:
    """Run ``case`` in a database of its own on the server at ``url``, then print its
    tables. A smoke run goes on past a case that fails, to report every such case:
    it prints the traceback, and this returns False."""
    started = time.monotonic()
    try:
        with harness.database(url, database_name(case)) as database_url:
            tables = run_case(case, Context(database_url, seconds, figures, smoke=smoke))
    except Exception:
        if not smoke:
            raise
        traceback.print_exc()
        print(f"  ({case.name}: FAILED after {time.monotonic() - started:.1f} s)\n", flush=True)
        return False
    for table in tables:
        print(format_table(table))
        print(f"  ({case.name}: {time.monotonic() - started:.1f} s)\n", flush=True)
    return True


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this case")
    parser.add_argument(
        "--seconds",
        type=float,
        help=f"wanted length of each measurement (default {SECONDS:g}; {SMOKE_SECONDS:g} with "
        "--smoke)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="check that the cases run: all of them (or the --only ones), at the smallest "
        "size, no figures written",
    )
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    for module in MODULES:
        importlib.import_module(module)
    if options.list:
        for case in CASES:
            print(f"{case.name:<17} {case.description}{'' if case.default else ' (--only)'}")
        return 0
    chosen = [
        c for c in CASES if (c.name in options.only if options.only else options.smoke or c.default)
    ]
    if options.smoke:
        # A case that takes another's measurements alone runs within that one.
        names = {c.name for c in chosen}
        chosen = [c for c in chosen if c.part_of not in names]
    unknown = set(options.only or ()) - {c.name for c in CASES}
    if unknown:
        known = ", ".join(c.name for c in CASES)
        print(f"unknown case(s): {', '.join(sorted(unknown))}; known: {known}", file=sys.stderr)
        return 2
    if options.smoke:
        # In the environment, so that every process of the run reads the same scale.
        os.environ[harness.ENV_SCALE] = str(SMOKE_SCALE)
    try:
        scale = harness.scale()
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    seconds = options.seconds
    if seconds is None:
        seconds = SMOKE_SECONDS if options.smoke else SECONDS
    figures: dict[str, float] = {}
    with harness.server() as url:
        version = asyncio.run(harness.admin(url, "SHOW server_version"))
        header = (
            f"tickwork bench: PostgreSQL {version}, Python {platform.python_version()}, "
            f"{os.cpu_count()} CPUs, {seconds:g} s per measurement"
            + ("" if scale == 1 else f", scale {scale:g}")
            + (", smoke run (the figures mean nothing)" if options.smoke else "")
        )
        print(header + "\n", flush=True)
        failed = [
            case.name
            for case in chosen
            if not run_and_print(case, url, seconds, figures, smoke=options.smoke)
        ]
    print(format_table(summary(figures)), flush=True)
    if options.smoke:
        print(f"\n(a smoke run: {RESULTS.name} left as it was)")
        if failed:
            print(f"failed: {', '.join(failed)} ({len(failed)} of {len(chosen)})", file=sys.stderr)
        return 1 if failed else 0
    merged = write_results(header, figures, partial=bool(options.only))
    print(f"\n(figures written to {RESULTS.name}{'' if merged else ', replacing it'})")
    return 0


def write_results(header: str, figures: dict[str, float], *, partial: bool) -> bool:
    """Write ``bench-results.json``. A partial run (``--only``) merges its figures into
    the file's, so the other cases' figures stay; True when it merged."""
    kept: dict[str, Any] = {}
    if partial and RESULTS.exists():
        try:
            earlier = orjson.loads(RESULTS.read_bytes())
        except orjson.JSONDecodeError:
            earlier = None
        if isinstance(earlier, dict) and isinstance(earlier.get("figures"), dict):
            kept = earlier["figures"]
    RESULTS.write_bytes(
        orjson.dumps(
            {"about": header, "figures": {**kept, **figures}},
            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS,
        )
        + b"\n"
    )
    return bool(kept)


def summary(figures: dict[str, float]) -> Table:
    """The headline figures: every tickwork figure as a ratio to its raw-SQL baseline,
    measured in this run on this server, next to its target."""
    rows = [
        {
            "key": key,
            "figure": what,
            "value": figures.get(key),
            "target": target,
            "met": verdict(figures[key], target),
        }
        for key, what, target in SUMMARY
        if key in figures
    ]
    rows += [
        {"key": key, "figure": "", "value": value, "target": "", "met": ""}
        for key, value in figures.items()
        if key not in {k for k, _, _ in SUMMARY}
    ]
    return Table(
        "summary (bench-results.json)",
        rows,
        notes=[
            "ratios divide by the baseline measured just before, on the same server",
            "CPU per run: of each process over the measurement (bench.cpu); the budgets do "
            "not depend on the cores being shared",
        ],
    )


def verdict(value: float, target: str) -> str:
    """``pass`` or ``FAIL`` for a figure against a target such as ``>= 0.7``; blank for
    a figure without one."""
    if not target:
        return ""
    comparison, bound = target.split()
    return "pass" if COMPARISONS[comparison](value, float(bound)) else "FAIL"


if __name__ == "__main__":
    raise SystemExit(main())
