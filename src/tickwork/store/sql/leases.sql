-- The worker path: claim, heartbeat, complete; and the scheduler's reaper and due flip.
-- $now parameters are NULL in production (database clock) and pinned in tests.

-- name: claim
-- One single-shard transaction: lock up to $2 ready runs of the queues in $1, highest
-- priority first, oldest ready first, skipping rows another claimer holds. A run of a
-- job with a concurrency limit is taken only while the job has a free slot, counting
-- the runs this claim takes before it (rank); runs over the limit wait in `ready`.
-- Concurrent claimers can still both see a free slot: leases.claim settles that after
-- commit, under a lock per job (see over_limit).
WITH picked AS (
    SELECT id, tenant, job, concurrency, priority, ready_at
    FROM runs AS r
    WHERE state = 'ready'
      AND queue = ANY($1::text[])
      AND ($6::text IS NULL OR tenant = $6)
      -- A job already at its limit is passed over here, before the LIMIT, so its
      -- waiting runs do not block the runs of other jobs behind them.
      AND (r.concurrency = 0
           OR (SELECT count(*)
               FROM runs AS held
               WHERE held.tenant = r.tenant
                 AND held.job = r.job
                 AND held.state = 'leased') < r.concurrency)
    ORDER BY priority, ready_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), allowed AS (
    SELECT ranked.id
    FROM (
        SELECT picked.*,
               row_number() OVER (PARTITION BY tenant, job
                                  ORDER BY priority, ready_at, id) AS rank
        FROM picked
    ) AS ranked
    WHERE ranked.concurrency = 0
       OR ranked.rank + (SELECT count(*)
                         FROM runs AS held
                         WHERE held.tenant = ranked.tenant
                           AND held.job = ranked.job
                           AND held.state = 'leased') <= ranked.concurrency
), clock AS (
    SELECT coalesce($4::timestamptz, now()) AS now
), leased AS (
    UPDATE runs AS r
    SET state = 'leased',
    attempt = r.attempt + 1,
    fencing_token = nextval('fencing_tokens'),
    lease_owner = $3,
    leased_at = clock.now,
    deadline = clock.now + make_interval(secs => r.timeout_seconds),
    lease_expires_at = least(
        clock.now + make_interval(secs => $5::double precision),
        clock.now + make_interval(secs => r.timeout_seconds)),
    updated_at = clock.now
    FROM allowed, clock
    WHERE r.id = allowed.id
    RETURNING r.id, r.tenant, r.job, r.queue, r.priority, r.attempt, r.max_attempts,
              r.idempotency_key, r.fencing_token, r.due_at, r.ready_at, r.leased_at,
              r.lease_expires_at, r.deadline, r.payload, r.concurrency, r.dry_run
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM leased
    ON CONFLICT DO NOTHING
)
SELECT * FROM leased

-- name: lock_jobs
-- Serialise the limit check of these jobs ($1: 'tenant/job' keys, sorted by the caller
-- so two claimers never wait on each other in a cycle).
SELECT pg_advisory_xact_lock(hashtextextended(key, 0)) FROM unnest($1::text[]) AS key

-- name: over_limit
-- Leased runs over each job's limit, counted in a statement that starts after the job
-- lock is held, so it sees every lease committed by an earlier holder.
SELECT j.tenant, j.job, count(r.id) - j.limit_ AS excess
FROM unnest($1::text[], $2::text[], $3::integer[]) AS j(tenant, job, limit_)
JOIN runs AS r ON r.tenant = j.tenant AND r.job = j.job AND r.state = 'leased'
GROUP BY j.tenant, j.job, j.limit_
HAVING count(r.id) > j.limit_

-- name: heartbeat
-- Extend the leases of runs $1 held with tokens $2 (pairwise, $2[i] for $1[i]) by $3
-- seconds, never past the attempt's deadline nor more than 6 hours at once. The id list
-- drives the primary-key lookup; array_position pairs each row with its own token, so
-- swapped tokens match nothing (joining unnest() here made the planner hash-join).
-- $5/$6 scope the caller to a tenant and queues (NULL: unrestricted).
WITH clock AS (SELECT coalesce($4::timestamptz, now()) AS now)
UPDATE runs AS r
SET lease_expires_at = least(
        clock.now + make_interval(secs => $3::double precision),
        r.deadline,
        clock.now + interval '6 hours'),
    updated_at = clock.now
FROM clock
WHERE r.id = ANY($1::bigint[])
  AND r.fencing_token = ($2::bigint[])[array_position($1::bigint[], r.id)]
  AND r.state = 'leased'
  AND ($5::text IS NULL OR r.tenant = $5)
  AND ($6::text[] IS NULL OR r.queue = ANY($6::text[]))
RETURNING r.id, r.fencing_token, r.lease_expires_at, r.cancel_requested

-- name: complete_succeeded
-- The hot path: every succeeded run of the batch in one statement, history included.
-- A run whose cancel was requested while leased records `cancelled`.
WITH clock AS (
    SELECT coalesce($3::timestamptz, now()) AS now
), done AS (
    UPDATE runs AS r
    SET state = CASE WHEN r.cancel_requested THEN 'cancelled' ELSE 'succeeded' END,
        finished_at = clock.now,
        lease_expires_at = NULL,
        updated_at = clock.now
    FROM clock
    WHERE r.id = ANY($1::bigint[])
      AND r.fencing_token = ($2::bigint[])[array_position($1::bigint[], r.id)]
      AND r.state = 'leased'
      AND ($4::text IS NULL OR r.tenant = $4)
      AND ($5::text[] IS NULL OR r.queue = ANY($5::text[]))
    RETURNING r.id, r.tenant, r.job, r.attempt, r.fencing_token, r.lease_owner,
              r.leased_at, r.finished_at, r.state
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM done
    ON CONFLICT DO NOTHING
)
INSERT INTO attempts (run_id, attempt, fencing_token, worker_id, leased_at, finished_at,
                      outcome, result_state)
SELECT id, attempt, fencing_token, lease_owner, leased_at, finished_at,
       CASE WHEN state = 'cancelled' THEN 'cancelled' ELSE 'succeeded' END, state
FROM done
RETURNING run_id, fencing_token, result_state, next_attempt_at

-- name: lock_leased
-- The failure path locks its rows first: the retry delay is drawn in Python.
SELECT id, attempt, max_attempts, retry_base, retry_max, fencing_token, cancel_requested
FROM runs
WHERE id = ANY($1::bigint[])
  AND fencing_token = ($2::bigint[])[array_position($1::bigint[], id)]
  AND state = 'leased'
  AND ($3::text IS NULL OR tenant = $3)
  AND ($4::text[] IS NULL OR queue = ANY($4::text[]))
FOR UPDATE

-- name: lock_expired
-- Leases past their expiry, oldest first; SKIP LOCKED lets a worker's completion that
-- is racing the reaper win cleanly.
SELECT id, attempt, max_attempts, retry_base, retry_max, fencing_token, cancel_requested
FROM runs
WHERE state = 'leased'
  AND lease_expires_at <= coalesce($1::timestamptz, now())
ORDER BY lease_expires_at
LIMIT $2
FOR UPDATE SKIP LOCKED

-- name: record_failures
-- Apply the outcomes decided for locked leased runs: $2 the new state (retry_wait, dead
-- or cancelled), $3 the retry delay in seconds, $4 the error, $5 the attempt outcome.
WITH clock AS (
    SELECT coalesce($6::timestamptz, now()) AS now
), decided AS (
    SELECT *
    FROM unnest($1::bigint[], $2::text[], $3::double precision[], $4::jsonb[], $5::text[])
         AS d(id, state, delay, error, outcome)
), changed AS (
    UPDATE runs AS r
    SET state = d.state,
        ready_at = CASE WHEN d.state = 'retry_wait'
                        THEN clock.now + make_interval(secs => d.delay)
                        ELSE r.ready_at END,
        finished_at = CASE WHEN d.state = 'retry_wait' THEN NULL ELSE clock.now END,
        last_error = d.error,
        lease_expires_at = NULL,
        updated_at = clock.now
    FROM decided AS d, clock
    WHERE r.id = d.id
    RETURNING r.id, r.tenant, r.job, r.attempt, r.fencing_token, r.lease_owner,
              r.leased_at, r.state, r.ready_at, d.outcome, d.error, clock.now AS at
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM changed
    ON CONFLICT DO NOTHING
)
INSERT INTO attempts (run_id, attempt, fencing_token, worker_id, leased_at, finished_at,
                      outcome, result_state, next_attempt_at, error)
SELECT id, attempt, fencing_token, lease_owner, leased_at, at, outcome, state,
       CASE WHEN state = 'retry_wait' THEN ready_at END, error
FROM changed
RETURNING run_id, fencing_token, result_state, next_attempt_at

-- name: completion_of
-- What an earlier completion with this token answered (for idempotent repeats).
SELECT result_state, next_attempt_at
FROM attempts
WHERE run_id = $1 AND fencing_token = $2 AND outcome <> 'lease-expired'

-- name: promote_due
-- Scheduled and retry-waiting runs whose time has come become ready; a first attempt
-- past its starting deadline is skipped instead.
WITH clock AS (
    SELECT coalesce($2::timestamptz, now()) AS now
), due AS (
    SELECT id
    FROM runs, clock
    WHERE state IN ('scheduled', 'retry_wait')
      AND ready_at <= clock.now
    ORDER BY ready_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE runs AS r
    SET state = CASE WHEN r.attempt = 0 AND r.start_deadline < clock.now
                     THEN 'skipped' ELSE 'ready' END,
        finished_at = CASE WHEN r.attempt = 0 AND r.start_deadline < clock.now
                           THEN clock.now END,
        updated_at = clock.now
    FROM due, clock
    WHERE r.id = due.id
    RETURNING r.tenant, r.job, r.queue, r.state
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM promoted
    ON CONFLICT DO NOTHING
)
SELECT queue, state FROM promoted

-- name: skip_past_deadline
-- Ready first attempts nobody leased before their starting deadline end as skipped.
WITH clock AS (
    SELECT coalesce($2::timestamptz, now()) AS now
), late AS (
    SELECT id
    FROM runs, clock
    WHERE start_deadline < clock.now
      AND attempt = 0
      AND state IN ('scheduled', 'ready')
    ORDER BY start_deadline
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), skipped AS (
    UPDATE runs AS r
    SET state = 'skipped', finished_at = clock.now, updated_at = clock.now
    FROM late, clock
    WHERE r.id = late.id
    RETURNING r.id, r.tenant, r.job
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM skipped
    ON CONFLICT DO NOTHING
)
SELECT id FROM skipped

-- name: notify_ready
-- Wake long-polling lease requests; delivered only when the transaction commits.
SELECT pg_notify('tickwork_ready', queue)
FROM (SELECT DISTINCT unnest($1::text[]) AS queue) AS queues

-- name: seconds_until_next_due
-- How long until the next waiting run becomes due (NULL: none waiting), so the
-- scheduler can wake for it instead of up to a whole interval late.
SELECT extract(epoch FROM min(ready_at) - coalesce($1::timestamptz, now()))::double precision
FROM runs
WHERE state IN ('scheduled', 'retry_wait')

-- name: release
-- Give back leases nobody received (the long-poll's client went away): the runs are
-- ready again and the attempt is not counted. Their next lease draws a new token.
WITH released AS (
    UPDATE runs
    SET state = 'ready',
        attempt = attempt - 1,
        lease_owner = NULL,
        leased_at = NULL,
        lease_expires_at = NULL,
        deadline = NULL,
        updated_at = coalesce($3::timestamptz, now())
    WHERE id = ANY($1::bigint[])
      AND fencing_token = ($2::bigint[])[array_position($1::bigint[], id)]
      AND state = 'leased'
    RETURNING tenant, job, queue
), marked AS (
    -- Status: the job's runs changed (writes nothing for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM released
    ON CONFLICT DO NOTHING
)
SELECT queue FROM released
