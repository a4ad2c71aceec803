-- tickwork shard schema, version 10: doubling the shard count (`tickwork reshard`).
--
-- reshard_journal: one row per reshard this shard took part in, as the source that
-- splits (shard k of S, whose jobs go to k or k + S) or as the new shard k + S. While a
-- row is 'moving' the roles refuse to start on this shard: a reshard cut short (killed,
-- a database lost mid-way) is finished by running it again, not served half done. What
-- is still to move needs no list: it is the jobs still on the source whose shard with
-- the new count is k + S.
--
-- moved_runs: where each run that left this shard went (a run keeps its number, on the
-- new shard), so a run id handed out before the reshard still finds its run: the
-- heartbeat of a worker that leased it, a completion, GET /v1/runs/{id}. A reshard
-- later moves a run again from its new shard, and the lookup follows each hop.

CREATE TABLE reshard_journal (
    from_count   integer NOT NULL CHECK (from_count >= 1),
    to_count     integer NOT NULL CHECK (to_count = 2 * from_count),
    role         text NOT NULL CHECK (role IN ('source', 'target')),
    phase        text NOT NULL CHECK (phase IN ('moving', 'done')),
    moved_jobs   bigint NOT NULL DEFAULT 0 CHECK (moved_jobs >= 0),
    moved_runs   bigint NOT NULL DEFAULT 0 CHECK (moved_runs >= 0),
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    PRIMARY KEY (from_count, to_count)
);

CREATE TABLE moved_runs (
    run_id    bigint PRIMARY KEY,
    shard     integer NOT NULL CHECK (shard >= 0),
    moved_at  timestamptz NOT NULL
);
