"""Random faults, drawn from a seeded generator, several at a time."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Final

from soak.cluster import Cluster

# How often each fault is drawn, relatively.
WEIGHTS: Final = {
    "kill -9": 4,
    "SIGSTOP past the lease": 2,
    "postgres immediate restart": 1,
    "partition": 2,
    "reset": 2,
}
MAX_AT_ONCE: Final = 3


class Chaos:
    def __init__(self, cluster: Cluster, rng: random.Random, lease_seconds: float) -> None:
        self.cluster = cluster
        self.rng = rng
        self.lease_seconds = lease_seconds
        self.counts: collections.Counter[str] = collections.Counter()
        self.detail: collections.Counter[str] = collections.Counter()
        self._running: set[asyncio.Task[None]] = set()
        self._postgres = asyncio.Lock()

    async def run(self, stop: asyncio.Event) -> None:
        """Start a fault every 1-4 s until ``stop``, then wait for the ones under way
        (each heals itself when it ends)."""
        actions: dict[str, Callable[[], Awaitable[None]]] = {
            "kill -9": self.kill,
            "SIGSTOP past the lease": self.stop_worker,
            "postgres immediate restart": self.restart_postgres,
            "partition": self.partition,
            "reset": self.reset,
        }
        names = list(WEIGHTS)
        while not stop.is_set():
            if len(self._running) < MAX_AT_ONCE:
                [name] = self.rng.choices(names, [WEIGHTS[n] for n in names])
                self.counts[name] += 1
                task = asyncio.create_task(actions[name]())
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.uniform(1.0, 4.0))
        if self._running:
            await asyncio.gather(*self._running)

    async def kill(self) -> None:
        role = self.rng.choice([r for r in self.cluster.roles.values() if r.alive])
        self.detail[f"kill -9 {role.kind}"] += 1
        role.kill()
        await asyncio.sleep(self.rng.uniform(0.5, 3.0))
        role.start()

    async def stop_worker(self) -> None:
        candidates = [r for r in self.cluster.of_kind("worker") if r.alive and not r.paused]
        if not candidates:
            return
        role = self.rng.choice(candidates)
        role.pause()
        await asyncio.sleep(self.lease_seconds + self.rng.uniform(2.0, 5.0))
        role.resume()

    async def restart_postgres(self) -> None:
        async with self._postgres:
            await asyncio.to_thread(self.cluster.postgres.stop, "immediate")
            await asyncio.sleep(self.rng.uniform(1.0, 4.0))
            await asyncio.to_thread(self.cluster.postgres.start)

    async def partition(self) -> None:
        name = self.rng.choice(sorted(self.cluster.links))
        self.detail[f"partition {name.split('-')[0]}"] += 1
        link = self.cluster.links[name]
        if link.hanging:
            return
        link.hang()
        await asyncio.sleep(self.rng.uniform(1.0, 10.0))
        link.heal()

    async def reset(self) -> None:
        name = self.rng.choice(sorted(self.cluster.links))
        self.detail[f"reset {name.split('-')[0]}"] += 1
        self.cluster.links[name].reset()
