-- tickwork shard schema, version 16: unique and debounced enqueues.
-- compatible-from: 13
--
-- (13: this release's migrations 14 to 17 only add, so the previous release, at 13,
-- keeps serving a shard they migrated.)
--
-- enqueue_keys: for a job with a `unique` or `debounce` rule, the run that last took
-- each key. The row is also the lock: an enqueue takes it (INSERT ... ON CONFLICT DO
-- UPDATE, which waits for a concurrent enqueue of the key to commit) before it reads
-- that run in a statement of its own, so enqueues of one key, from any dispatcher
-- replica, follow one another in the shard and each sees the run the previous one left.
-- A key is given back lazily: a run that left the states where it holds its key holds
-- nothing, and the next enqueue of the key takes the row over (no statement that moves
-- a run on has to know about keys). run_id is NULL between the lock and the insert.
-- Retention forgets a row whose run is gone from live_runs past the horizon it keeps
-- run_keys for (enqueue_keys_taken).
CREATE TABLE enqueue_keys (
    tenant text NOT NULL,
    job text NOT NULL,
    key text NOT NULL,
    run_id bigint,
    taken_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, job, key)
);
CREATE INDEX enqueue_keys_taken ON enqueue_keys (taken_at);

-- run_keys.request_fingerprint: the request an Idempotency-Key was given with, when it
-- answered a run another request made (a deduplicated or debounced enqueue), so that
-- repeating the request gets the same answer and another request with the key is
-- refused. NULL: the key's own run keeps the fingerprint, as before.
ALTER TABLE run_keys ADD COLUMN request_fingerprint bytea;
