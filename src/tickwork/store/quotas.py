"""Tenant quotas in PostgreSQL: the enqueue rate bucket and the pending-run count.

The bucket is one row per tenant on one shard, so every dispatcher replica draws from
the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    take_enqueue_tokens: str
    pending_runs_of_tenant: str


@dataclass(frozen=True, slots=True)
class Take:
    admitted: bool
    tokens_left: float
    taken: float


async def take_enqueue_tokens(
    conn: Connection,
    tenant: str,
    runs: int,
    rate: float,
    burst: float,
    now: datetime | None = None,
    ahead: float = 0.0,
) -> Take:
    """Take ``runs`` tokens from the tenant's bucket, or ``ahead`` of them when the
    bucket holds that many (an allowance to admit from locally): one statement, which
    commits without waiting for its WAL flush, so the enqueue waits for one flush (its
    own), not two. Outside a transaction only: inside one, the setting would relax the
    caller's commit."""
    if conn.is_in_transaction():
        raise RuntimeError("take_enqueue_tokens commits on its own: call it outside a transaction")
    row = await conn.fetchrow(
        SQL.take_enqueue_tokens, tenant, float(runs), rate, burst, now, float(ahead)
    )
    assert row is not None
    return Take(row["admitted"], float(row["tokens"]), float(row["taken"]))


async def pending_runs(conn: Connection, tenant: str, up_to: int) -> int:
    """The tenant's scheduled, ready and retry-waiting runs on this shard (at most
    ``up_to``)."""
    count = await conn.fetchval(SQL.pending_runs_of_tenant, tenant, up_to)
    assert isinstance(count, int)
    return count
