"""``python -m bench [--only NAME] [--seconds S] [--list]``: run the benchmark cases.

Without ``TICKWORK_BENCH_DATABASE_URL`` a private PostgreSQL (the pgserver wheel)
starts in a temporary directory and is stopped and removed at the end; with it, that
server is used (the role needs CREATEDB). Each case gets a database of its own, created
empty and dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import inspect
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench import CASES, Case, CaseResult, Context, format_table

# Modules whose import registers their cases, in the order they run.
MODULES: tuple[str, ...] = (
    "bench.store",
    "bench.http",
    "bench.materialiser",
    "bench.dashboard",
    "bench.status_feed",
)

ENV_URL = "TICKWORK_BENCH_DATABASE_URL"


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


@contextlib.contextmanager
def server() -> Iterator[str]:
    """The URL of a PostgreSQL server to create the cases' databases on."""
    external = os.environ.get(ENV_URL)
    if external:
        yield external
        return
    with warnings.catch_warnings():
        # platformdirs warns on import when XDG_RUNTIME_DIR is unset; irrelevant here.
        warnings.simplefilter("ignore")
        import pgserver

    folder = tempfile.mkdtemp(prefix="tickwork-bench-pg-")
    postgres = pgserver.get_server(folder, cleanup_mode="stop")  # type: ignore[attr-defined]
    try:
        yield str(postgres.get_uri())
    finally:
        postgres.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


async def _admin(url: str, statement: str) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def case_database(url: str, case: Case) -> Iterator[str]:
    name = f"tickwork_bench_{case.name.replace('-', '_')}_{os.getpid()}"
    asyncio.run(_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    asyncio.run(_admin(url, f'CREATE DATABASE "{name}"'))
    try:
        yield with_database(url, name)
    finally:
        asyncio.run(_admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def run_case(case: Case, context: Context) -> CaseResult:
    result = case.run(context)
    if inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> CaseResult:
    result: CaseResult = await awaitable
    return result


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this case")
    parser.add_argument(
        "--seconds",
        type=float,
        default=4.0,
        help="wanted length of each measurement (default 4)",
    )
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    for module in MODULES:
        importlib.import_module(module)
    if options.list:
        for case in CASES:
            print(f"{case.name:<12} {case.description}")
        return 0
    chosen = [c for c in CASES if not options.only or c.name in options.only]
    unknown = set(options.only or ()) - {c.name for c in CASES}
    if unknown:
        known = ", ".join(c.name for c in CASES)
        print(f"unknown case(s): {', '.join(sorted(unknown))}; known: {known}", file=sys.stderr)
        return 2
    with server() as url:
        version = asyncio.run(_admin(url, "SHOW server_version"))
        print(
            f"tickwork bench: PostgreSQL {version}, Python {platform.python_version()}, "
            f"{os.cpu_count()} CPUs, {options.seconds:g} s per measurement\n",
            flush=True,
        )
        for case in chosen:
            started = time.monotonic()
            with case_database(url, case) as database_url:
                tables = run_case(case, Context(database_url, options.seconds))
            for table in tables:
                print(format_table(table))
                print(f"  ({case.name}: {time.monotonic() - started:.1f} s)\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
