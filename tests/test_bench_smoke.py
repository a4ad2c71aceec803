"""The benchmarks still run: ``python -m bench --smoke`` runs every case once, at the
smallest size and with short measurements, against the test session's PostgreSQL, and
each case prints its tables.

The figures of a smoke run mean nothing (``make bench`` measures); this catches a case
that crashes, or prints nothing, after a change to what it drives. The run is a
process of its own, as ``make bench`` is: the cases start dispatchers, a scheduler and
pools of worker processes, and change process-wide state this process should keep.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Most of a smoke run is processes starting (a dispatcher for each HTTP case, a scheduler,
# pools of worker SDK processes), which a busy machine slows down several times over.
RUN_TIMEOUT = 300.0

pytestmark = pytest.mark.timeout(RUN_TIMEOUT + 60)

# The line under each table of a case: "  (name: 1.2 s)".
FOOTER = re.compile(r"^  \(([a-z-]+): [0-9.]+ s\)$", re.MULTILINE)


@contextlib.contextmanager
def bench(*args: str, server_url: str) -> Iterator[subprocess.Popen[str]]:
    """``python -m bench`` on the session's server; stopped on the way out if still
    running."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=environment | {"TICKWORK_BENCH_DATABASE_URL": server_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            interrupt(process)


def interrupt(process: subprocess.Popen[str]) -> tuple[str, str]:
    """Ctrl-C, so that the bench stops the processes it started; what it printed."""
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


def output(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = interrupt(process)
        pytest.fail(f"{process.args} took over {timeout:g} s:\n{err[-5000:]}\n{out[-5000:]}")


# Cases that run alone what ``http`` runs among the others (lease + complete, the idle
# wake-up, the enqueues): ``http`` drives the same code, and each starts a dispatcher
# and worker processes of its own, which would cost the suite a minute of two cores.
# ``make bench-smoke`` runs them too.
ALONE_IN_HTTP = frozenset({"http-lease", "http-wakeup", "enqueue"})


def test_every_case_runs_and_prints_its_tables(server_url: str) -> None:
    with bench("--list", server_url=server_url) as listing:
        listed, _ = output(listing, 60)
    cases = [line.split()[0] for line in listed.splitlines()]
    assert set(cases) > ALONE_IN_HTTP and len(cases) >= 10
    chosen = [case for case in cases if case not in ALONE_IN_HTTP]
    only = [argument for case in chosen for argument in ("--only", case)]
    with bench("--smoke", *only, server_url=server_url) as smoke:
        out, err = output(smoke, RUN_TIMEOUT)

    ran = FOOTER.findall(out)
    times = "\n".join(line for line in out.splitlines() if line.startswith("  ("))
    assert smoke.returncode == 0, f"{err[-5000:]}\n{times}"
    assert "smoke run" in out.splitlines()[0]
    assert sorted(set(ran)) == sorted(chosen), f"cases without a table: {set(chosen) - set(ran)}"
    assert "(no rows)" not in out
