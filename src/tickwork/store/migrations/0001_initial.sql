-- tickwork shard schema, version 1.
-- Every shard database (or schema) holds the same tables; the shard's number and the
-- shard count live in shard_meta so a mis-wired DSN list is caught at start-up.

CREATE TABLE shard_meta (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    shard        integer NOT NULL CHECK (shard >= 0),
    shard_count  integer NOT NULL CHECK (shard_count > shard),
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The fencing epoch of the scheduler that owns this shard. Nothing bumps it yet: shard
-- ownership will (a new owner bumps it before writing, so a deposed owner's guarded
-- writes match no row). Until then every scheduler works every shard it is given.
CREATE TABLE shard_epoch (
    singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch        bigint NOT NULL DEFAULT 0,
    owner        text,
    acquired_at  timestamptz
);
INSERT INTO shard_epoch DEFAULT VALUES;

-- Fencing tokens: one sequence per shard, so the tokens of a run strictly increase.
CREATE SEQUENCE fencing_tokens AS bigint;

CREATE TABLE definitions (
    tenant          text NOT NULL,
    name            text NOT NULL,
    spec            jsonb NOT NULL,
    queue           text NOT NULL,
    priority        smallint NOT NULL CHECK (priority BETWEEN 0 AND 2),
    paused          boolean NOT NULL DEFAULT false,
    next_due_at     timestamptz,
    -- How many missed fire times the last catch-up dropped (run_all cap), for status.
    missed_dropped  integer NOT NULL DEFAULT 0,
    generation      bigint NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
-- The materialiser reads only due, active definitions: its cost follows due jobs.
CREATE INDEX definitions_due ON definitions (next_due_at)
    WHERE NOT paused AND next_due_at IS NOT NULL;

CREATE TABLE runs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant            text NOT NULL,
    job               text NOT NULL,
    queue             text NOT NULL,
    priority          smallint NOT NULL CHECK (priority BETWEEN 0 AND 2),
    state             text NOT NULL CHECK (state IN (
                          'scheduled', 'ready', 'leased', 'retry_wait',
                          'succeeded', 'dead', 'cancelled', 'discarded', 'skipped')),
    origin            text NOT NULL CHECK (origin IN ('cron', 'once', 'api')),
    attempt           integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL CHECK (max_attempts >= 1),
    retry_base        double precision NOT NULL,
    retry_max         double precision NOT NULL,
    timeout_seconds   integer NOT NULL,
    due_at            timestamptz NOT NULL,
    ready_at          timestamptz NOT NULL,
    -- A first attempt not started by then ends as skipped (startingDeadlineSeconds).
    start_deadline    timestamptz,
    -- NULL for ad hoc runs enqueued without a key: the API renders tenant/name#runId.
    idempotency_key   text,
    payload           jsonb,
    fencing_token     bigint,
    lease_owner       text,
    leased_at         timestamptz,
    lease_expires_at  timestamptz,
    -- leased_at + timeout_seconds: no heartbeat extends a lease past it.
    deadline          timestamptz,
    cancel_requested  boolean NOT NULL DEFAULT false,
    last_error        jsonb,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    finished_at       timestamptz
);

-- A double materialisation (failover, split brain) inserts nothing the second time.
CREATE UNIQUE INDEX runs_cron_due ON runs (tenant, job, due_at) WHERE origin = 'cron';
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, job, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- One partial index per loop, so each touches only its own rows.
CREATE INDEX runs_claimable ON runs (priority, ready_at, id) WHERE state = 'ready';
CREATE INDEX runs_waiting ON runs (ready_at) WHERE state IN ('scheduled', 'retry_wait');
CREATE INDEX runs_leases ON runs (lease_expires_at) WHERE state = 'leased';
CREATE INDEX runs_leased_job ON runs (tenant, job) WHERE state = 'leased';
CREATE INDEX runs_start_deadline ON runs (start_deadline)
    WHERE start_deadline IS NOT NULL AND attempt = 0 AND state IN ('scheduled', 'ready');
CREATE INDEX runs_dead ON runs (tenant, finished_at DESC, id DESC) WHERE state = 'dead';
CREATE INDEX runs_by_job ON runs (tenant, job, id DESC);

-- One row per finished attempt (completed, failed or reaped); partitioned by day so
-- retention is a partition drop. The attempt in flight is read from its run row.
CREATE TABLE attempts (
    run_id          bigint NOT NULL,
    attempt         integer NOT NULL,
    fencing_token   bigint NOT NULL,
    worker_id       text,
    leased_at       timestamptz NOT NULL,
    finished_at     timestamptz NOT NULL,
    outcome         text NOT NULL CHECK (outcome IN (
                        'succeeded', 'failed', 'lease-expired', 'cancelled')),
    -- The run state this attempt's completion produced, and when the next attempt may
    -- start: a repeated completion with the same token gets the same answer from here.
    result_state    text NOT NULL,
    next_attempt_at timestamptz,
    error           jsonb
) PARTITION BY RANGE (finished_at);
CREATE TABLE attempts_default PARTITION OF attempts DEFAULT;
CREATE INDEX attempts_run ON attempts (run_id, attempt);

-- Who changed what: definition changes, cancels, DLQ replays and discards.
CREATE TABLE audit_log (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL,
    tenant   text NOT NULL,
    job      text NOT NULL,
    run_id   bigint,
    action   text NOT NULL,
    actor    text NOT NULL,
    detail   jsonb
);
CREATE INDEX audit_log_job ON audit_log (tenant, job, id DESC);
