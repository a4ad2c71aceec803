"""The keys of unique and debounced enqueues (JobSpec ``unique``, ``debounce``): which
run each key of a job went to, and the row lock that makes enqueues of one key follow
one another across dispatcher replicas (``sql/enqueue_keys.sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tickwork.core.records import Run
from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    take_enqueue_keys: str
    runs_by_ids: str
    point_enqueue_keys: str
    debounce_runs: str
    answer_run_keys: str
    forget_old_enqueue_keys: str


async def take(
    conn: Connection, shard: int, tenant: str, job: str, keys: Sequence[str], now: datetime | None
) -> dict[str, Run]:
    """Lock ``keys`` until the transaction ends (waiting for an enqueue that holds one)
    and answer the run each names, where there is one still to be found."""
    rows = await conn.fetch(SQL.take_enqueue_keys, tenant, job, sorted(keys), now)
    run_ids = {row["key"]: row["run_id"] for row in rows if row["run_id"] is not None}
    if not run_ids:
        return {}
    found = {
        row["id"]: Run.from_record(shard, row)
        for row in await conn.fetch(SQL.runs_by_ids, list(run_ids.values()))
    }
    return {key: found[run_id] for key, run_id in run_ids.items() if run_id in found}


async def point(
    conn: Connection,
    tenant: str,
    job: str,
    keys: Sequence[str],
    run_ids: Sequence[int],
    now: datetime | None,
) -> None:
    """The taken ``keys`` now name ``run_ids``."""
    if keys:
        await conn.execute(SQL.point_enqueue_keys, tenant, job, list(keys), list(run_ids), now)


async def debounce(
    conn: Connection,
    shard: int,
    run_ids: Sequence[int],
    payloads_json: Sequence[str | None],
    priorities: Sequence[int],
    seconds: float,
    longest_seconds: float,
    now: datetime | None,
) -> dict[int, Run]:
    """Give runs not started yet a new payload and priority, and start them ``seconds``
    from now (at most ``longest_seconds`` after they were made); the runs changed, by
    id (one a claim leased first is left out)."""
    if not run_ids:
        return {}
    rows = await conn.fetch(
        SQL.debounce_runs,
        list(run_ids),
        list(payloads_json),
        list(priorities),
        seconds,
        longest_seconds,
        now,
    )
    return {row["id"]: Run.from_record(shard, row) for row in rows}


async def answer_keys(
    conn: Connection,
    tenant: str,
    job: str,
    answered: Sequence[tuple[str, int, bytes]],
    now: datetime | None,
) -> None:
    """Record Idempotency-Keys (with their requests' fingerprints) that another
    enqueue's run answered: ``(key, run id, fingerprint)``."""
    if answered:
        await conn.execute(
            SQL.answer_run_keys,
            tenant,
            job,
            [key for key, _, _ in answered],
            [run_id for _, run_id, _ in answered],
            [fingerprint for _, _, fingerprint in answered],
            now,
        )


async def forget_old(conn: Connection, horizon: datetime) -> int:
    """Forget the keys whose run is no longer live, taken before ``horizon``."""
    status = await conn.execute(SQL.forget_old_enqueue_keys, horizon)
    return int(status.split()[-1])
