-- The scheduler's sweeps over a shard: the reaper, the due flip and the starting-deadline
-- skip. Each runs in a transaction that first checks the shard's epoch (epochs.sql).

-- name: lock_expired
-- Leases past their expiry, oldest first; SKIP LOCKED lets a worker's completion that
-- is racing the reaper win cleanly. The leased runs are read through live_runs_leased
-- and filtered here: no index covers the expiry, so heartbeats stay HOT updates.
SELECT id, attempt, max_attempts, retry_base, retry_max, fencing_token, cancel_requested,
       tenant, job, priority
FROM live_runs
WHERE state = 'leased'
  AND lease_expires_at <= coalesce($1::timestamptz, now())
ORDER BY lease_expires_at
LIMIT $2
FOR UPDATE SKIP LOCKED

-- name: promote_due
-- Scheduled and retry-waiting runs whose time has come become ready; a first attempt
-- past its starting deadline is skipped instead (and moves to the history).
WITH clock AS (
    SELECT coalesce($2::timestamptz, now()) AS now
), due AS (
    SELECT id, coalesce(attempt = 0 AND start_deadline < clock.now, false) AS late
    FROM live_runs, clock
    WHERE state IN ('scheduled', 'retry_wait')
      AND ready_at <= clock.now
    ORDER BY ready_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), flipped AS (
    -- = ANY(ARRAY(...)): primary-key probes, never a hash join over the whole table.
    UPDATE live_runs AS r
    SET state = 'ready', updated_at = clock.now
    FROM clock
    WHERE r.id = ANY(ARRAY(SELECT id FROM due WHERE NOT late))
    RETURNING r.tenant, r.job, r.queue, r.state
), ended AS (
    DELETE FROM live_runs AS r
    WHERE r.id = ANY(ARRAY(SELECT id FROM due WHERE late))
    RETURNING r.*
), moved AS (
    INSERT INTO finished_runs
    SELECT id, tenant, job, queue, priority, 'skipped', origin, attempt, max_attempts,
           retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
           idempotency_key, payload, fencing_token, lease_owner, leased_at,
           lease_expires_at, deadline, cancel_requested, last_error, created_at, clock.now,
           clock.now, concurrency, request_fingerprint
    FROM ended, clock
    RETURNING tenant, job, queue, state
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM (SELECT tenant, job FROM flipped UNION ALL SELECT tenant, job FROM moved) AS c
    ON CONFLICT DO NOTHING
)
SELECT queue, state FROM flipped
UNION ALL
SELECT queue, state FROM moved

-- name: skip_past_deadline
-- Ready first attempts nobody leased before their starting deadline end as skipped.
WITH clock AS (
    SELECT coalesce($2::timestamptz, now()) AS now
), late AS (
    SELECT id
    FROM live_runs, clock
    WHERE start_deadline < clock.now
      AND attempt = 0
      AND state IN ('scheduled', 'ready')
    ORDER BY start_deadline
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), ended AS (
    DELETE FROM live_runs AS r
    WHERE r.id = ANY(ARRAY(SELECT id FROM late))
    RETURNING r.*
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM ended
    ON CONFLICT DO NOTHING
)
INSERT INTO finished_runs
SELECT id, tenant, job, queue, priority, 'skipped', origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at, lease_expires_at,
       deadline, cancel_requested, last_error, created_at, clock.now, clock.now,
       concurrency, request_fingerprint
FROM ended, clock
RETURNING id

-- name: seconds_until_next_due
-- How long until the next waiting run becomes due (NULL: none waiting), so the
-- scheduler can wake for it instead of up to a whole interval late.
SELECT extract(epoch FROM min(ready_at) - coalesce($1::timestamptz, now()))::double precision
FROM live_runs
WHERE state IN ('scheduled', 'retry_wait')
