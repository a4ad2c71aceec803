-- The scheduler's sweeps over a shard: the reaper, the due flip (with the overlap
-- policies of scheduled fires) and the starting-deadline skip. Each runs in a
-- transaction that first checks the shard's epoch (epochs.sql).

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
-- past its starting deadline is skipped instead (and moves to the history). A fire of a
-- job with an overlap policy is left to the overlap statements below (or, once past its
-- deadline, to skip_past_deadline).
WITH clock AS (
    SELECT coalesce($2::timestamptz, now()) AS now
), due AS (
    SELECT id, coalesce(attempt = 0 AND start_deadline < clock.now, false) AS late
    FROM live_runs, clock
    WHERE state IN ('scheduled', 'retry_wait')
      AND ready_at <= clock.now
      AND (overlap IS NULL OR state <> 'scheduled')
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

-- name: overlap_due_jobs
-- Overlap policies (spec.overlapPolicy) of scheduled fires are decided in the due flip's
-- transaction, before the flip itself: find the jobs with a fire due (this statement),
-- lock them (lock_overlap_jobs), then decide in statements that start after the locks
-- are held, so a decision sees every run an earlier decision made ready.
-- Jobs with a fire due now whose overlap policy is Forbid or Replace (on the small
-- partial index live_runs_overlap_due); fires past their starting deadline are the
-- deadline skip's. No row is locked here.
WITH clock AS (
    SELECT coalesce($2::timestamptz, now()) AS now
)
SELECT DISTINCT due.tenant, due.job
FROM (SELECT r.tenant, r.job
      FROM live_runs AS r, clock
      WHERE r.state = 'scheduled' AND r.overlap IS NOT NULL
        AND r.ready_at <= clock.now
        AND (r.start_deadline IS NULL OR r.start_deadline >= clock.now)
      ORDER BY r.ready_at
      LIMIT $1) AS due
ORDER BY due.tenant, due.job

-- name: lock_overlap_jobs
-- Serialise the overlap decisions of these jobs ($1: 'tenant/job' keys, sorted by the
-- caller so two flips never wait on each other in a cycle) to the end of the transaction.
SELECT pg_advisory_xact_lock(hashtextextended('overlap ' || key, 0))
FROM unnest($1::text[]) AS key

-- name: lock_overlap_fires
-- The due fires of the locked jobs ($1 tenants, $2 jobs, pairwise), oldest first, each
-- with what runs of its job now: the newest run that is ready, leased or waiting to
-- retry, whatever made it (NULL: none). `shard` names the runs in messages.
WITH clock AS (
    SELECT coalesce($3::timestamptz, now()) AS now
)
SELECT j.tenant, j.job, f.id, f.overlap, f.due_at, running.id AS running_id,
       running.state AS running_state, (SELECT shard FROM shard_meta) AS shard
FROM unnest($1::text[], $2::text[]) AS j(tenant, job)
CROSS JOIN clock
CROSS JOIN LATERAL (
    SELECT r.id, r.overlap, r.due_at
    FROM live_runs AS r
    WHERE r.tenant = j.tenant AND r.job = j.job
      AND r.state = 'scheduled' AND r.overlap IS NOT NULL
      AND r.ready_at <= clock.now
      AND (r.start_deadline IS NULL OR r.start_deadline >= clock.now)
    FOR UPDATE SKIP LOCKED
) AS f
LEFT JOIN LATERAL (
    -- A job's live runs are in two indexes, the leased ones apart.
    SELECT b.id, b.state
    FROM ((SELECT l.id, l.state FROM live_runs AS l
           WHERE l.tenant = j.tenant AND l.job = j.job AND l.state = 'leased'
           ORDER BY l.id DESC LIMIT 1)
          UNION ALL
          (SELECT w.id, w.state FROM live_runs AS w
           WHERE w.tenant = j.tenant AND w.job = j.job
             AND w.state IN ('ready', 'retry_wait')
           ORDER BY w.id DESC LIMIT 1)) AS b
    ORDER BY b.state = 'leased' DESC, b.id DESC
    LIMIT 1
) AS running ON true
ORDER BY j.tenant, j.job, f.due_at, f.id

-- name: replace_running
-- Replace: every run of these jobs ($1 tenants, $2 jobs, $3 the error that names the
-- run replacing it, pairwise) that is ready, leased or waiting to retry is asked to stop.
-- One statement for the three states: a run that a worker leases or fails meanwhile is
-- checked again once its lock is released, and caught in the state it reached.
WITH clock AS (
    SELECT coalesce($4::timestamptz, now()) AS now
), replaced AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS j(tenant, job, error)
)
UPDATE live_runs AS r
SET cancel_requested = true, last_error = replaced.error, updated_at = clock.now
FROM replaced, clock
-- = ANY(ARRAY(...)): primary-key probes, never a hash join over the whole table.
WHERE r.id = ANY(ARRAY(
        SELECT b.id
        FROM replaced AS j
        CROSS JOIN LATERAL (
            (SELECT l.id FROM live_runs AS l
             WHERE l.tenant = j.tenant AND l.job = j.job AND l.state = 'leased')
            UNION ALL
            (SELECT w.id FROM live_runs AS w
             WHERE w.tenant = j.tenant AND w.job = j.job
               AND w.state IN ('ready', 'retry_wait'))) AS b))
  AND r.tenant = replaced.tenant AND r.job = replaced.job
  AND r.state IN ('ready', 'leased', 'retry_wait')
  AND NOT r.cancel_requested
RETURNING r.id, r.tenant, r.job, r.state

-- name: settle_overlap
-- The decisions: $1 the fires that start (ready now); $2, $3, $4 (pairwise) runs that end
-- now, the state they end in (skipped: a fire Forbid skipped; cancelled: a fire or a run
-- Replace stopped before a worker leased it) and their error; $5 now. Every run named
-- is locked by this transaction already. Skipped fires count in their job's
-- overlap_skipped.
WITH clock AS (
    SELECT coalesce($5::timestamptz, now()) AS now
), flipped AS (
    UPDATE live_runs AS r
    SET state = 'ready', updated_at = clock.now
    FROM clock
    WHERE r.id = ANY($1::bigint[]) AND r.state = 'scheduled'
    RETURNING r.tenant, r.job, r.queue, r.state
), decided AS (
    SELECT * FROM unnest($2::bigint[], $3::text[], $4::jsonb[]) AS d(id, state, error)
), ended AS (
    DELETE FROM live_runs AS r
    WHERE r.id = ANY(ARRAY(SELECT id FROM decided))
      AND r.state IN ('scheduled', 'ready', 'retry_wait')
    RETURNING r.*
), moved AS (
    INSERT INTO finished_runs (id, tenant, job, queue, priority, state, origin, attempt,
                               max_attempts, retry_base, retry_max, timeout_seconds,
                               due_at, ready_at, start_deadline, idempotency_key, payload,
                               fencing_token, lease_owner, leased_at, lease_expires_at,
                               deadline, cancel_requested, last_error, created_at,
                               updated_at, finished_at, concurrency, request_fingerprint)
    SELECT e.id, e.tenant, e.job, e.queue, e.priority, d.state, e.origin, e.attempt,
           e.max_attempts, e.retry_base, e.retry_max, e.timeout_seconds, e.due_at,
           e.ready_at, e.start_deadline, e.idempotency_key, e.payload, e.fencing_token,
           e.lease_owner, e.leased_at, e.lease_expires_at, e.deadline, e.cancel_requested,
           d.error, e.created_at, clock.now, clock.now, e.concurrency,
           e.request_fingerprint
    FROM ended AS e
    JOIN decided AS d ON d.id = e.id
    CROSS JOIN clock
    RETURNING tenant, job, queue, state
), counted AS (
    UPDATE definitions AS d
    SET overlap_skipped = d.overlap_skipped + s.fires
    FROM (SELECT tenant, job, count(*) AS fires
          FROM moved WHERE state = 'skipped' GROUP BY tenant, job) AS s
    WHERE d.tenant = s.tenant AND d.name = s.job
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job
    FROM (SELECT tenant, job FROM flipped UNION ALL SELECT tenant, job FROM moved) AS c
    ON CONFLICT DO NOTHING
)
SELECT tenant, job, queue, state FROM flipped
UNION ALL
SELECT tenant, job, queue, state FROM moved
