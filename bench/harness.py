"""What every bench command stands on: a PostgreSQL server, databases of their own on
it, and the scale of the work.

Without ``TICKWORK_BENCH_DATABASE_URL`` a private PostgreSQL (the pgserver wheel)
starts in a temporary directory and is stopped and removed at the end; with it, that
server is used (the role needs CREATEDB).

``TICKWORK_BENCH_SCALE`` (default 1) multiplies the sizes of the work: definitions,
runs and samples. ``TICKWORK_BENCH_SCALE=0.1 python -m bench --only materialise`` is a
quick look; ``python -m bench --smoke`` sets it far lower.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ENV_URL: Final = "TICKWORK_BENCH_DATABASE_URL"
ENV_SCALE: Final = "TICKWORK_BENCH_SCALE"


@contextlib.contextmanager
def server() -> Iterator[str]:
    """The URL of a PostgreSQL server to create the bench's databases on."""
    external = os.environ.get(ENV_URL)
    if external:
        yield external
        return
    with warnings.catch_warnings():
        # platformdirs warns on import when XDG_RUNTIME_DIR is unset; irrelevant here.
        warnings.simplefilter("ignore")
        import pgserver

    folder = tempfile.mkdtemp(prefix="tickwork-bench-pg-")
    # pgserver re-exports get_server without marking it (no implicit re-export in --strict).
    postgres = pgserver.get_server(folder, cleanup_mode="stop")  # type: ignore[attr-defined]
    try:
        yield str(postgres.get_uri())
    finally:
        postgres.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (keeps host, socket and credentials)."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def admin(url: str, statement: str) -> Any:
    """The first value ``statement`` returns, on a connection of its own."""
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def database(url: str, name: str) -> Iterator[str]:
    """Database ``name`` on the server at ``url``, created empty and dropped afterwards;
    yields its URL. One an interrupted run left behind is dropped first."""
    drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    asyncio.run(admin(url, drop))
    asyncio.run(admin(url, f'CREATE DATABASE "{name}"'))
    try:
        yield with_database(url, name)
    finally:
        asyncio.run(admin(url, drop))


def scale() -> float:
    """``TICKWORK_BENCH_SCALE``: a positive number, 1 when unset."""
    text = os.environ.get(ENV_SCALE, "1")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    # Zero or less would not shrink a case but empty it: its figures would mean nothing.
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{ENV_SCALE} must be a positive number, not {text!r}")
    return value


def scaled(count: int, *, least: int = 0) -> int:
    """``count`` times the scale, and at least ``least``: the size under which a case
    would have nothing left to measure."""
    return max(least, round(count * scale()))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` (inclusive method, as every table of the
    bench reads them); the value itself for one, 0 for none."""
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[round(fraction * 100) - 1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(process: subprocess.Popen[bytes], port: int, what: str) -> None:
    """Return once ``process`` accepts connections on ``port`` of 127.0.0.1; raise if it
    ends first or takes over 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)
