"""The roles of the soak as real processes, and the links between them as proxies."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from faults.postgres import PostgresProcess, free_port
from faults.proxy import TcpProxy

TICKWORK = str(Path(sys.executable).with_name("tickwork"))
CHECKOUT = Path(__file__).resolve().parents[1]  # where ``soak.worker`` is imported from
SHARDS = 4
TENANT = "soak"
TEAM_TOKEN = "soak-team-token-0123456789"
WORKER_TOKEN = "soak-worker-token-0123456789"
ADMIN_TOKEN = "soak-admin-token-0123456789"
TOKENS = f"""\
- {{token: {TEAM_TOKEN}, tenant: {TENANT}, role: team}}
- {{token: {WORKER_TOKEN}, tenant: {TENANT}, role: worker, queues: [default]}}
- {{token: {ADMIN_TOKEN}, tenant: ops, role: admin}}
"""


@dataclass
class Role:
    """One process of the install; ``start()`` again after a kill."""

    name: str
    kind: str  # dispatcher, scheduler or worker
    argv: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    # An exit is expected only after we killed the process ourselves.
    killed: bool = False
    paused: bool = False
    starts: int = 0
    exits_on_its_own: list[str] = field(default_factory=list)

    def start(self) -> None:
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts + 1} at {time.strftime('%X')}\n".encode())
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        self.starts += 1
        self.killed = False
        self.paused = False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye; restart with ``start()``."""
        if self.process is None:
            return
        self.killed = True
        if self.alive:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.paused = False

    def pause(self) -> None:
        if self.alive and not self.paused:
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused and self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def watch(self) -> None:
        """Restart a process that exited without being killed, and say so."""
        if self.process is None or self.killed or self.alive:
            return
        tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
        self.exits_on_its_own.append(f"rc {self.process.returncode}: " + " | ".join(tail))
        self.start()

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, then the exit code (None: did not stop in time, killed)."""
        self.resume()
        if self.process is None:
            return None
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


@dataclass
class Cluster:
    folder: Path
    postgres: PostgresProcess
    database_url: str
    roles: dict[str, Role]
    # A proxy per link: db-<role> (a role to PostgreSQL), http-<dispatcher> (workers).
    links: dict[str, TcpProxy]
    api_urls: list[str]

    def of_kind(self, kind: str) -> list[Role]:
        return [role for role in self.roles.values() if role.kind == kind]


async def build(
    folder: Path, postgres: PostgresProcess, database_url: str, workers: int, lease: float
) -> Cluster:
    tokens = folder / "tokens.yaml"
    tokens.write_text(TOKENS)
    links: dict[str, TcpProxy] = {}
    roles: dict[str, Role] = {}
    api_urls = []
    quiet = {"TICKWORK_LOG_LEVEL": "WARNING"}
    for letter in "ab":
        for kind in ("dispatcher", "scheduler"):
            name = f"{kind}-{letter}"
            link = await TcpProxy("127.0.0.1", postgres.port).start()
            links[f"db-{name}"] = link
            database = ["--database-url", link.dsn(database_url), "--shards", str(SHARDS)]
            if kind == "dispatcher":
                port = free_port()
                api_urls.append(f"http://127.0.0.1:{port}")
                links[f"http-{name}"] = await TcpProxy("127.0.0.1", port).start()
                argv = [TICKWORK, kind, *database, "--port", str(port), "--host", "127.0.0.1"]
                argv += ["--tokens", str(tokens), "--enqueue-rate", "100000"]
            else:
                argv = [TICKWORK, kind, *database]
            roles[name] = Role(name, kind, argv, quiet, folder / f"{name}.log")
    http_links = [links["http-dispatcher-a"], links["http-dispatcher-b"]]
    for number in range(workers):
        name = f"worker-{number}"
        via = http_links[number % 2]
        env = {
            **quiet,
            "TICKWORK_URL": f"http://127.0.0.1:{via.port}",
            "TICKWORK_TOKEN": WORKER_TOKEN,
            "TICKWORK_QUEUES": "default",
            "SOAK_RESULTS": str(folder / f"{name}.results"),
            "SOAK_LEASE_SECONDS": str(lease),
            "PYTHONPATH": str(CHECKOUT),
        }
        argv = [sys.executable, "-m", "soak.worker"]
        roles[name] = Role(name, "worker", argv, env, folder / f"{name}.log")
    return Cluster(folder, postgres, database_url, roles, links, api_urls)


async def watch(cluster: Cluster, stop: asyncio.Event) -> None:
    """Until ``stop``: restart (and record) any role that exits on its own."""
    while not stop.is_set():
        for role in cluster.roles.values():
            role.watch()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)
