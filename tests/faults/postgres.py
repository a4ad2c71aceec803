"""A private PostgreSQL server that a test may stop and start at will.

It runs pgserver's binaries directly (``initdb``, ``pg_ctl``) in a temporary folder and
listens on 127.0.0.1 only, so the session server the other tests share is never
touched. As root, the server runs as pgserver's unprivileged user, as pgserver does.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Final

import pgserver.utils
from pgserver import _commands

# The binaries of the pgserver wheel (initdb, pg_ctl, postgres).
BIN: Final = Path(_commands.POSTGRES_BIN_PATH)
SYSTEM_USER: Final = "pgserver"
# Fast, and crash-safe for what the tests do: an immediate stop kills the server
# processes, not the machine, so the operating system still holds every write it was
# given (fsync off). Commits stay synchronous: a commit acknowledged is in the WAL.
SETTINGS: Final = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "shared_buffers": "32MB",
    "log_min_messages": "warning",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PostgresProcess:
    """``start()``, ``stop()`` (immediate by default: a crash), ``start()`` again."""

    def __init__(self, folder: Path | None = None, port: int | None = None) -> None:
        self.folder = folder or Path(tempfile.mkdtemp(prefix="tickwork-faults-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "postgres.log"
        self.port = port or free_port()
        self._user: str | None = None
        if os.geteuid() == 0:
            pgserver.utils.ensure_user_exists(SYSTEM_USER)
            self._user = SYSTEM_USER
            shutil.chown(self.folder, SYSTEM_USER, SYSTEM_USER)
        self.running = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, timeout: float = 60) -> None:
        command = [str(BIN / program), *args]
        result = subprocess.run(
            command,
            user=self._user,
            cwd=self.folder,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} {' '.join(args)} failed: {result.stderr!r}\n{log}")

    def init(self) -> PostgresProcess:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "utf8")
        with (self.data / "postgresql.conf").open("a") as conf:
            for key, value in {**SETTINGS, "port": str(self.port)}.items():
                conf.write(f"{key} = {value}\n")
        return self

    def start(self, *, wait: bool = True) -> None:
        """Start the server; with ``wait``, return once it accepts connections (after
        crash recovery, when the last stop was immediate)."""
        args = ["-D", str(self.data), "-l", str(self.log)]
        args += ["-w", "-t", "60"] if wait else ["-W"]
        self._run("pg_ctl", *args, "start")
        self.running = True

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; ``immediate`` kills it without a checkpoint, like a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.running = False

    def destroy(self) -> None:
        if self.running:
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
