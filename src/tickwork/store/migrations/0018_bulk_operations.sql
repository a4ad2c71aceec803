-- tickwork shard schema, version 18: bulk operations on runs by filter.
-- compatible-from: 13
--
-- Expand only: a new table and new indexes, which the previous release neither reads
-- nor writes.
--
-- operations: a bulk replay, discard or cancel of the runs matching a filter, one row
-- per shard under the same id (`op-…`): the runs of a shard are acted on by the
-- scheduler that owns it, in batches, each batch one transaction that acts on its runs
-- and moves `cursor` (the largest run id dealt with) and `processed` on, so an
-- operation interrupted anywhere resumes exactly where it stopped. `total` is what
-- matched when the row was made, at `created_at`: only runs that existed by then (dead
-- by then, for a replay or discard) are acted on. `processed` counts the runs acted
-- on: a run that no longer matches when its batch comes (replayed meanwhile by hand)
-- is passed over.
CREATE TABLE operations (
    id text NOT NULL,
    tenant text NOT NULL,
    action text NOT NULL CHECK (action IN ('replay', 'discard', 'cancel')),
    filter jsonb NOT NULL,
    state text NOT NULL CHECK (state IN ('running', 'done', 'cancelled')),
    total bigint NOT NULL,
    processed bigint NOT NULL DEFAULT 0,
    cursor bigint NOT NULL DEFAULT 0,
    actor text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY (id)
);
-- A tenant's recent operations (GET /v1/operations).
CREATE INDEX operations_by_tenant ON operations (tenant, created_at DESC, id DESC);
-- What a scheduler pass looks for: the few operations still running.
CREATE INDEX operations_running ON operations (created_at, id) WHERE state = 'running';

-- A replay or discard walks a tenant's dead runs in id order (the keyset cursor).
CREATE INDEX finished_runs_dead_by_id ON finished_runs (tenant, id) WHERE state = 'dead';
