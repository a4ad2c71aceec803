"""``python replica.py scheduler ...``: the ``tickwork`` command line in a process of
its own, with one fault hook for the split-brain test.

When the file named by ``$REPLICA_PAUSE_FILE`` appears, the process stops itself with
SIGSTOP in its next scheduler transaction, just before the transaction's epoch check:
the widest window a pause can hit, since the process decided it still owns the shard
and nothing of the transaction has reached the database yet. It writes the shard's
schema and the epoch it held into ``$REPLICA_PAUSE_FILE.stopped`` first, and carries
on when sent SIGCONT.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tickwork import cli
from tickwork.store import epochs
from tickwork.store.database import Connection


def install_pause(marker: Path) -> None:
    check = epochs.check

    async def paused_check(conn: Connection, fence: epochs.Fence | None) -> None:
        # Blocking file calls on purpose: nothing else of the process may run first.
        if fence is not None and marker.exists():  # noqa: ASYNC240
            marker.unlink(missing_ok=True)  # noqa: ASYNC240 - once
            schema = await conn.fetchval("SELECT current_schema()")
            Path(f"{marker}.stopped").write_text(f"{schema} {fence.epoch}")  # noqa: ASYNC240
            os.kill(os.getpid(), signal.SIGSTOP)
        await check(conn, fence)

    epochs.check = paused_check  # type: ignore[assignment]


if __name__ == "__main__":
    if pause := os.environ.get("REPLICA_PAUSE_FILE"):
        install_pause(Path(pause))
    cli.main()
