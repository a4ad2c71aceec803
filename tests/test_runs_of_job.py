"""The runs of a job, newest first, whatever state each is in: the live ones are indexed
in two parts (leased apart from the rest) and the finished ones in the history, and a
page, a cursor or a state filter reads across all three."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.core.records import Completion, Outcome, State
from tickwork.core.shards import ShardMap
from tickwork.store import database as db
from tickwork.store import leases, runs

T0 = datetime(2026, 3, 15, 1, 0, tzinfo=UTC)

PRELOAD = """
INSERT INTO live_runs (tenant, job, queue, priority, state, origin, max_attempts,
                       retry_base, retry_max, timeout_seconds, due_at, ready_at,
                       created_at, updated_at)
SELECT 'acme', $1, 'runs-of-job', 1, 'ready', 'api', 3, 1, 10, 3600, $2, $2, $2, $2
FROM generate_series(1, $3)
"""


async def test_a_page_of_a_jobs_runs_mixes_ready_leased_and_finished_newest_first(
    shard_map: ShardMap,
) -> None:
    conn = await db.connect(shard_map[0])
    try:
        # Runs made one at a time and leased or finished alternately: every state has
        # old and new ids, so each part's order must merge with the others'.
        expected: dict[int, State] = {}
        for n in range(12):
            await conn.execute(PRELOAD, "job", T0, 1)
            if n % 3 == 0:
                continue
            [lease] = await leases.claim(conn, 0, ["runs-of-job"], 1, "w", 300, T0)
            if n % 3 == 2:
                await leases.complete(
                    conn, 0, [Completion(lease.id, lease.fencing_token, Outcome.succeeded)], T0
                )
        await conn.execute(PRELOAD, "other", T0, 5)  # another job's runs stay out
        for row in await conn.fetch("SELECT id, state FROM runs WHERE job = 'job'"):
            expected[row["id"]] = State(row["state"])
        assert set(expected.values()) == {State.ready, State.leased, State.succeeded}
        newest_first = sorted(expected, reverse=True)

        page = await runs.list_of_job(conn, 0, "acme", "job", limit=5)
        assert [r.id for r in page] == newest_first[:5]
        rest = await runs.list_of_job(conn, 0, "acme", "job", before_id=page[-1].id, limit=50)
        assert [r.id for r in rest] == newest_first[5:]
        assert {r.id: r.state for r in page + rest} == expected

        leased = await runs.list_of_job(conn, 0, "acme", "job", state=State.leased)
        assert [r.id for r in leased] == [i for i in newest_first if expected[i] is State.leased]
        # One run by id, in each part.
        for run_id, state in expected.items():
            assert (await runs.get(conn, 0, run_id)).state is state
    finally:
        await conn.close()
