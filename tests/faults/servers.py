"""PostgreSQL servers for the tests that need more than one: separate servers for the
shards, and a primary with a synchronous streaming standby that takes over when the
primary dies (``pg_basebackup -R``, then ``pg_ctl promote``).

initdb is most of a server's start: ``copy_of`` gives a server a copy of the data
folder of one that was initialised and never started. Every wait is on an answer
(``pg_ctl -w``, a query), bounded by a timeout.
"""

from __future__ import annotations

import os
import shutil
from typing import Final, TypeVar

import asyncpg
from polling import eventually

from faults.postgres import PostgresProcess

# The standby's name on the primary: its ``cluster_name``, which its WAL receiver gives
# as ``application_name``, and what ``synchronous_standby_names`` waits for.
STANDBY_NAME: Final = "tickwork_standby"

Server = TypeVar("Server", bound=PostgresProcess)


def copy_of(template: PostgresProcess, server: Server) -> Server:
    """``server`` (not initialised) with a copy of ``template``'s data folder, made by
    ``template.init()`` and never started, listening on its own port."""
    shutil.copytree(template.data, server.data, symlinks=True)
    if server._user is not None:
        for folder, _, files in os.walk(server.data):
            shutil.chown(folder, server._user, server._user)
            for name in files:
                shutil.chown(os.path.join(folder, name), server._user, server._user)
    with (server.data / "postgresql.conf").open("a") as conf:
        conf.write(f"port = {server.port}\n")
    return server


class Primary(PostgresProcess):
    """A server whose commits wait until its standby has flushed them to its WAL: a
    commit acknowledged to a client survives the primary's death."""

    def init(self) -> Primary:
        super().init()
        return self.streaming()

    def streaming(self) -> Primary:
        """Configure the (initialised) server for its synchronous standby."""
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("wal_level = replica\n")
            conf.write("max_wal_senders = 4\n")
            conf.write(f"synchronous_standby_names = 'FIRST 1 ({STANDBY_NAME})'\n")
            conf.write("synchronous_commit = on\n")
        # The standby connects for replication from 127.0.0.1: initdb's pg_hba.conf
        # (trust, as the other tests' servers) has that entry already.
        return self

    def restart_as_standby_of(self, server: PostgresProcess) -> None:
        """Start the stopped server again as a hot standby of ``server``, as a failover
        manager brings back a failed primary: it answers, read-only, and takes no
        writes, whether or not it can follow ``server`` (a crashed primary may have WAL
        its standby never got)."""
        signal = self.data / "standby.signal"
        signal.touch()
        if self._user is not None:
            shutil.chown(signal, self._user, self._user)
        with (self.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = 'host=127.0.0.1 port={server.port} user=postgres'\n")
        self.start()


class Standby(PostgresProcess):
    """A hot standby of ``primary``, streaming its WAL; ``promote()`` makes it the
    primary."""

    def __init__(self, primary: Primary) -> None:
        super().__init__()
        self.primary = primary

    def init(self) -> Standby:
        self._run(
            "pg_basebackup",
            *("-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.primary.port)),
            *("-U", "postgres", "-R", "-X", "stream", "-c", "fast"),
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.port}\n")
            conf.write(f"cluster_name = '{STANDBY_NAME}'\n")
            conf.write("hot_standby = on\n")
            # Promoted, it has no standby of its own: waiting for one would hang every
            # commit until one is attached.
            conf.write("synchronous_standby_names = ''\n")
        return self

    def promote(self) -> None:
        """End recovery: once this returns the server accepts writes."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")


async def in_sync(primary: Primary, within: float = 30.0) -> None:
    """Wait until the primary counts its standby as synchronous."""
    connection = await asyncpg.connect(primary.url)

    async def synchronous() -> bool:
        state = await connection.fetchval(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
            STANDBY_NAME,
        )
        return bool(state == "sync")

    try:
        await eventually(synchronous, within=within, what="the standby synchronous")
    finally:
        await connection.close()


def multi_host_url(servers: list[PostgresProcess], database: str) -> str:
    """One URL naming every server of a shard: a client connects to the first that
    accepts writes."""
    hosts = ",".join(f"127.0.0.1:{server.port}" for server in servers)
    return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"
