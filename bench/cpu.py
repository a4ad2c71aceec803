"""Where the CPU goes: the CPU time of the processes behind a measurement, by role
(PostgreSQL, the dispatcher, the worker processes, the bench process), per run.

A ratio to the raw loop says how far tickwork is from it, not why; these figures say
which process spends the difference, on the same machine in the same run. They come
from ``/proc`` and are left out where there is none (or the server is not local).

A sampler thread reads every process's CPU time twice a second, so processes that end
with the measurement (the worker pool) are counted up to their last sample.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import asyncpg

PROC: Final = Path("/proc")
INTERVAL: Final = 0.5
TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def available() -> bool:
    return (PROC / "self" / "stat").exists()


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid``; None when it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _processes() -> dict[int, tuple[int, float]]:
    found = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                found[int(entry.name)] = stat
    return found


async def postmaster(database_url: str) -> int | None:
    """The PID of the local PostgreSQL server behind ``database_url``, if it is local."""
    if not available():
        return None
    conn = await asyncpg.connect(database_url)
    try:
        backend: int = await conn.fetchval("SELECT pg_backend_pid()")
        # Read while the connection is open: its backend process ends with it.
        stat = _stat(backend)
    finally:
        await conn.close()
    if stat is None:
        return None  # another machine's process number
    try:
        command = (PROC / str(stat[0]) / "cmdline").read_bytes()
    except OSError:
        return None
    return stat[0] if b"postgres" in command else None


@dataclass
class Meter:
    """CPU seconds per role; a role is the processes descended from its root PIDs (a
    process under two roles' roots counts for the nearest), or, for a role in
    ``exact``, that one process alone."""

    roots: dict[str, set[int]]
    exact: dict[str, int] = field(default_factory=dict)
    # (time, CPU seconds per role) twice a second, from start() to stop().
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    _seen: dict[int, tuple[str, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _role_of(
        self, pid: int, tree: dict[int, tuple[int, float]], owners: dict[int, str]
    ) -> str | None:
        for role, only in self.exact.items():
            if pid == only:
                return role
        seen: set[int] = set()
        while pid not in seen:
            if pid in owners:
                return owners[pid]
            seen.add(pid)
            parent = tree.get(pid)
            if parent is None:
                return None
            pid = parent[0]
        return None

    def sample(self) -> None:
        tree = _processes()
        owners = {root: role for role, pids in self.roots.items() for root in pids}
        for pid, (_parent, seconds) in tree.items():
            role = self._role_of(pid, tree, owners)
            if role is not None:
                self._seen[pid] = (role, seconds)
        totals = dict.fromkeys([*self.roots, *self.exact], 0.0)
        # A process that ended keeps its last reading: its CPU time was spent.
        for role, seconds in self._seen.values():
            totals[role] += seconds
        self.samples.append((time.time(), totals))

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def between(self, start: float, end: float) -> tuple[float, dict[str, float]]:
        """Seconds between the samples nearest inside [start, end], and CPU seconds per
        role spent between them. A window too short to hold two samples (under about a
        second, as with ``--seconds 1``) is read from the samples just around it and
        counted as the window's own length: its figures then take in some of what ran
        next to it."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) >= 2:
            (t0, first), (t1, last) = inside[0], inside[-1]
            return t1 - t0, {role: last[role] - first[role] for role in last}
        (_, first) = ([s for s in self.samples if s[0] <= start] or self.samples[:1])[-1]
        (_, last) = ([s for s in self.samples if s[0] >= end] or self.samples[-1:])[0]
        return end - start, {role: last[role] - first[role] for role in last}


@contextmanager
def metered(
    roots: dict[str, Iterable[int | None]], exact: dict[str, int] | None = None
) -> Iterator[Meter | None]:
    """A running ``Meter`` for roles with at least one known root (None without
    ``/proc``)."""
    known = {role: {pid for pid in pids if pid} for role, pids in roots.items()}
    known = {role: pids for role, pids in known.items() if pids}
    if not available() or not known:
        yield None
        return
    meter = Meter(known, dict(exact or {}))
    meter.start()
    try:
        yield meter
    finally:
        meter.stop()


def per_run(
    meter: Meter | None, start: float, end: float, rate: float, columns: dict[str, str]
) -> dict[str, float | None]:
    """``columns`` (role → column name): CPU microseconds per run of each role over the
    window, at ``rate`` runs/s, and ``CPUs busy``: the share of the machine's CPUs they
    kept busy together."""
    if meter is None or rate <= 0:
        return {name: None for name in [*columns.values(), "CPUs busy"]}
    seconds, spent = meter.between(start, end)
    if seconds <= 0:
        return {name: None for name in [*columns.values(), "CPUs busy"]}
    row: dict[str, float | None] = {
        name: round(spent.get(role, 0.0) / (rate * seconds) * 1e6) for role, name in columns.items()
    }
    row["CPUs busy"] = round(sum(spent.values()) / seconds / (os.cpu_count() or 1), 2)
    return row
