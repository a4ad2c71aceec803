-- tickwork shard schema, version 5: a narrow hot table of live runs, finished runs in
-- a day-partitioned history, and run keys that outlive both.
--
-- Measured on version 3 (EXPLAIN ANALYZE, BUFFERS, WAL; 200 000 ready and 500 000
-- finished runs): a claim wrote 7 WAL records per run and a completion 6, because
-- every lease grant was a non-HOT update of a wide row feeding nine indexes, and the
-- table kept every run ever finished. Now:
--   * live_runs holds scheduled, ready, leased and retry_wait runs only, with few
--     indexes: a grant writes the row and three index entries, a heartbeat is a HOT
--     update (no index covers the lease expiry), and the table stays the size of the
--     backlog, not of the history.
--   * A run that ends (succeeded, dead, cancelled, discarded, skipped) leaves
--     live_runs in the statement that ends it and lands in finished_runs, partitioned
--     by the UTC day it finished on: retention is a partition drop.
--   * run_keys holds the unique (tenant, job, due_at) of cron runs and the unique
--     (tenant, job, idempotency_key), for live and finished runs alike: a cron run
--     that already finished still stops a second materialisation of its fire time
--     (failover), and a key already used still answers its first run.
--   * `runs` is now a view over both tables, for reading (operators and tests).
-- Existing runs are copied in this migration's transaction.

CREATE SEQUENCE run_ids AS bigint;
SELECT setval('run_ids', coalesce((SELECT max(id) FROM runs), 0) + 1, false);

CREATE TABLE live_runs (
    id                  bigint PRIMARY KEY DEFAULT nextval('run_ids'),
    tenant              text NOT NULL,
    job                 text NOT NULL,
    queue               text NOT NULL,
    priority            smallint NOT NULL CHECK (priority BETWEEN 0 AND 2),
    state               text NOT NULL CHECK (state IN (
                            'scheduled', 'ready', 'leased', 'retry_wait')),
    origin              text NOT NULL CHECK (origin IN ('cron', 'once', 'api')),
    attempt             integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL CHECK (max_attempts >= 1),
    retry_base          double precision NOT NULL,
    retry_max           double precision NOT NULL,
    timeout_seconds     integer NOT NULL,
    due_at              timestamptz NOT NULL,
    ready_at            timestamptz NOT NULL,
    start_deadline      timestamptz,
    idempotency_key     text,
    payload             jsonb,
    fencing_token       bigint,
    lease_owner         text,
    leased_at           timestamptz,
    lease_expires_at    timestamptz,
    deadline            timestamptz,
    cancel_requested    boolean NOT NULL DEFAULT false,
    last_error          jsonb,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    finished_at         timestamptz,
    concurrency         integer NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
    request_fingerprint bytea
) WITH (fillfactor = 80);
ALTER SEQUENCE run_ids OWNED BY live_runs.id;

-- The claim walks ready runs of jobs without a concurrency limit by queue, priority
-- and tenant (round-robin between tenants), oldest first.
CREATE INDEX live_runs_claimable ON live_runs (queue, priority, tenant, ready_at, id)
    WHERE state = 'ready' AND concurrency = 0;
-- Runs of limited jobs, by job: a job at its limit is skipped as a whole, so its
-- backlog is never walked.
CREATE INDEX live_runs_limited ON live_runs (queue, priority, tenant, job, ready_at, id)
    WHERE state = 'ready' AND concurrency > 0;
CREATE INDEX live_runs_limited_leased ON live_runs (tenant, job)
    WHERE state = 'leased' AND concurrency > 0;
CREATE INDEX live_runs_waiting ON live_runs (ready_at)
    WHERE state IN ('scheduled', 'retry_wait');
-- Leased runs by tenant (fair shares); the reaper filters them on lease_expires_at,
-- which no index covers, so a heartbeat stays a HOT update.
CREATE INDEX live_runs_leased ON live_runs (tenant) WHERE state = 'leased';
CREATE INDEX live_runs_start_deadline ON live_runs (start_deadline)
    WHERE start_deadline IS NOT NULL AND attempt = 0 AND state IN ('scheduled', 'ready');
CREATE INDEX live_runs_by_job ON live_runs (tenant, job, id DESC);

CREATE TABLE finished_runs (LIKE live_runs INCLUDING DEFAULTS)
    PARTITION BY RANGE (finished_at);
ALTER TABLE finished_runs ALTER COLUMN finished_at SET NOT NULL;
ALTER TABLE finished_runs ADD CHECK (state IN (
    'succeeded', 'dead', 'cancelled', 'discarded', 'skipped'));
ALTER TABLE finished_runs ALTER COLUMN id DROP DEFAULT;
CREATE TABLE finished_runs_default PARTITION OF finished_runs DEFAULT;
CREATE INDEX finished_runs_id ON finished_runs (id);
CREATE INDEX finished_runs_by_job ON finished_runs (tenant, job, id DESC);
CREATE INDEX finished_runs_dead ON finished_runs (tenant, finished_at DESC, id DESC)
    WHERE state = 'dead';

CREATE TABLE run_keys (
    tenant           text NOT NULL,
    job              text NOT NULL,
    -- Cron runs only: their fire time.
    due_at           timestamptz,
    idempotency_key  text,
    run_id           bigint NOT NULL,
    created_at       timestamptz NOT NULL,
    CHECK (due_at IS NOT NULL OR idempotency_key IS NOT NULL)
);
CREATE UNIQUE INDEX run_keys_cron_due ON run_keys (tenant, job, due_at)
    WHERE due_at IS NOT NULL;
CREATE UNIQUE INDEX run_keys_idempotency ON run_keys (tenant, job, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX run_keys_created ON run_keys (created_at);

INSERT INTO live_runs
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts, retry_base,
       retry_max, timeout_seconds, due_at, ready_at, start_deadline, idempotency_key,
       payload, fencing_token, lease_owner, leased_at, lease_expires_at, deadline,
       cancel_requested, last_error, created_at, updated_at, finished_at, concurrency,
       request_fingerprint
FROM runs
WHERE state IN ('scheduled', 'ready', 'leased', 'retry_wait');

INSERT INTO finished_runs
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts, retry_base,
       retry_max, timeout_seconds, due_at, ready_at, start_deadline, idempotency_key,
       payload, fencing_token, lease_owner, leased_at, lease_expires_at, deadline,
       cancel_requested, last_error, created_at, updated_at,
       coalesce(finished_at, updated_at), concurrency, request_fingerprint
FROM runs
WHERE state NOT IN ('scheduled', 'ready', 'leased', 'retry_wait');

INSERT INTO run_keys (tenant, job, due_at, idempotency_key, run_id, created_at)
SELECT tenant, job, CASE WHEN origin = 'cron' THEN due_at END, idempotency_key, id,
       created_at
FROM runs
WHERE origin = 'cron' OR idempotency_key IS NOT NULL;

DROP TABLE runs;

CREATE VIEW runs AS
SELECT * FROM live_runs
UNION ALL
SELECT * FROM finished_runs;

-- The enqueue rate bucket of a tenant, kept on one shard (a hash of the tenant) and
-- shared by every dispatcher replica: N replicas admit the rate once, not N times.
-- `admitted` tells the caller whether its last take fitted.
CREATE TABLE enqueue_buckets (
    tenant     text PRIMARY KEY,
    tokens     double precision NOT NULL,
    at         timestamptz NOT NULL,
    admitted   boolean NOT NULL
) WITH (fillfactor = 50);

ANALYZE live_runs;
ANALYZE finished_runs;
ANALYZE run_keys;
