"""Scheduler replicas as real processes (``tickwork scheduler`` through ``replica.py``)
on one 8-shard database, coordinated through PostgreSQL or the emulated Kubernetes
API, and what the tests read of them: the shards each says it owns (``/readyz``), who
holds each shard's epoch and since when, and every run of the shards.

Short leases (2 s) keep a failover within seconds; every wait is on a condition with a
deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube import emulator
from polling import eventually

from tickwork.coordination.backend import shard_lease_name
from tickwork.core.shards import ShardMap
from tickwork.store import epochs, shard_leases
from tickwork.store.database import Database

REPLICA = Path(__file__).with_name("replica.py")
SHARDS = 8
NAMESPACE = "tickwork"
LEASE_SECONDS = 2.0
INTERVAL = 1.0
# The bound: a dead replica's shards are re-owned within the lease + one pass.
TAKEOVER_BOUND = LEASE_SECONDS + INTERVAL
STARTUP = 30.0  # a replica's first ownership, interpreter start included


@dataclass
class Replica:
    """One ``tickwork scheduler`` process; its output (stdout and stderr) read as lines."""

    identity: str
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    probes: str = ""
    reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while raw := await self.process.stdout.readline():
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    async def line(self, pattern: str, within: float = 10.0) -> re.Match[str]:
        """The first line of the output so far (or to come) matching ``pattern``."""
        compiled = re.compile(pattern)
        found: list[re.Match[str]] = []

        async def seen() -> bool:
            found[:] = [m for m in map(compiled.search, self.lines) if m][:1]
            if not found and self.process.returncode is not None:
                pytest.fail(f"{self.identity} exited before {pattern!r}:\n{self.output}")
            return bool(found)

        await eventually(seen, within=within, what=f"{self.identity}: {pattern!r}")
        return found[0]

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stopped(self) -> bool:
        """Stopped by a signal (SIGSTOP): state T in /proc."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    async def ready(self) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=2) as client:
            return dict((await client.get(f"{self.probes}/readyz")).json())

    async def metrics(self) -> str:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(f"{self.probes}/metrics")).text

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)

    async def terminate(self, within: float = 15.0) -> int:
        """SIGTERM; the exit status."""
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(within):
            status = await self.process.wait()
            if self.reader is not None:
                await self.reader
        return status


@dataclass
class Cluster:
    """The replicas of one test, the database they share, and the coordination."""

    url: str
    kind: str
    database: Database
    kube: emulator.Emulator | None
    workdir: Path
    replicas: list[Replica] = field(default_factory=list)

    async def start(self, identity: str, *, pause_file: Path | None = None) -> Replica:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
        if self.kube is not None:
            env["KUBECONFIG"] = str(self.kube.kubeconfig)
        if pause_file is not None:
            env["REPLICA_PAUSE_FILE"] = str(pause_file)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(REPLICA),
            *("scheduler", "--database-url", self.url, "--shards", str(SHARDS)),
            *("--coordination", self.kind, "--lease-namespace", NAMESPACE),
            *("--identity", identity, "--lease-seconds", str(LEASE_SECONDS)),
            *("--interval", str(INTERVAL), "--health-host", "127.0.0.1", "--health-port", "0"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd=self.workdir,
        )
        replica = Replica(identity, process)
        replica.reader = asyncio.create_task(replica._read())
        self.replicas.append(replica)
        replica.probes = (await replica.line(r"probes on (http://\S+)", STARTUP)).group(1)
        return replica

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.process.returncode is None]

    async def owned(self, replicas: Sequence[Replica]) -> dict[str, list[int]]:
        """The shards each replica says it may write to now (its /readyz)."""
        answers = await asyncio.gather(*(r.ready() for r in replicas))
        return {r.identity: answer["owned"] for r, answer in zip(replicas, answers, strict=True)}

    async def epochs(self) -> dict[int, epochs.Holder]:
        async def one(shard: int) -> epochs.Holder:
            async with self.database.connection(shard) as conn:
                return await epochs.current(conn)

        return dict(enumerate(await asyncio.gather(*(one(s) for s in range(SHARDS)))))

    async def balanced(self, replicas: Sequence[Replica]) -> bool:
        """Every shard owned by exactly one of ``replicas``, each at most at its aim,
        and each shard's epoch held by the replica that says it owns it."""
        owned = await self.owned(replicas)
        aim = math.ceil(SHARDS / len(replicas))
        shards = sorted(s for mine in owned.values() for s in mine)
        if shards != list(range(SHARDS)) or max(map(len, owned.values())) > aim:
            return False
        holders = await self.epochs()
        return all(holders[s].owner == who for who, mine in owned.items() for s in mine)

    async def wait_balanced(self, replicas: Sequence[Replica], within: float = 20.0) -> None:
        await eventually(
            lambda: self.balanced(replicas),
            within=within,
            every=0.05,
            what=f"ownership balanced over {[r.identity for r in replicas]}",
        )

    async def lease_holders(self) -> dict[int, str | None]:
        """Who holds each shard's lease in the backend (None: released)."""
        if self.kube is not None:
            return {
                shard: (self.kube.get("leases", shard_lease_name(shard), NAMESPACE) or {})
                .get("spec", {})
                .get("holderIdentity")
                for shard in range(SHARDS)
            }
        holders = {}
        for shard in range(SHARDS):
            async with self.database.connection(shard) as conn:
                holders[shard] = (await shard_leases.read(conn)).holder
        return holders


@contextlib.asynccontextmanager
async def cluster(
    url: str, kind: str, kube: emulator.Emulator, workdir: Path
) -> AsyncIterator[Cluster]:
    if kind == "kubernetes":
        await kube.create_namespace(NAMESPACE)
    async with Database(ShardMap.from_dsns([url], SHARDS)) as database:
        made = Cluster(url, kind, database, kube if kind == "kubernetes" else None, workdir)
        try:
            yield made
        finally:
            for replica in made.replicas:
                if replica.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        replica.process.send_signal(signal.SIGCONT)
                        replica.kill()
                    await replica.process.wait()
                if replica.reader is not None:
                    await replica.reader


def since(instant: datetime | None, wall: float) -> float:
    """Seconds from the wall-clock moment ``wall`` to ``instant``."""
    assert instant is not None
    return instant.timestamp() - wall
