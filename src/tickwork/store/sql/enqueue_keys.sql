-- Enqueues of jobs with a `unique` or `debounce` rule: the run each key went to. The
-- enqueue takes its keys' rows first (take_enqueue_keys), then reads their runs in a
-- statement of its own, so that it sees what every earlier enqueue of the keys left.

-- name: take_enqueue_keys
-- Lock the keys $3 of the job ($1, $2) until the transaction ends, making the rows that
-- do not exist yet (run_id NULL). A key a concurrent enqueue holds is waited for; its
-- row is then answered as that enqueue committed it. In key order, so that two batches
-- never wait for each other in a cycle.
INSERT INTO enqueue_keys AS k (tenant, job, key, run_id, taken_at)
SELECT $1, $2, new.key, NULL, coalesce($4::timestamptz, now())
FROM unnest($3::text[]) AS new(key)
ORDER BY new.key
ON CONFLICT (tenant, job, key) DO UPDATE SET run_id = k.run_id
RETURNING k.key, k.run_id

-- name: point_enqueue_keys
-- The keys $3 now name the runs $4 (the runs just made for them).
UPDATE enqueue_keys AS k
SET run_id = p.run_id, taken_at = coalesce($5::timestamptz, now())
FROM unnest($3::text[], $4::bigint[]) AS p(key, run_id)
WHERE k.tenant = $1 AND k.job = $2 AND k.key = p.key

-- name: debounce_runs
-- Runs not started yet ($1) take their burst's last payload ($2) and priority rank ($3)
-- and start $4 seconds from now, but no later than $5 seconds after they were made (a
-- burst that never ends still runs). Only a run still scheduled or ready and never
-- leased changes: one a claim took first is left to run, and its key gets a new run.
WITH clock AS (
    SELECT coalesce($6::timestamptz, now()) AS now
), pushed AS (
    UPDATE live_runs AS r
    SET payload = d.payload,
        priority = d.priority,
        due_at = greatest(least(clock.now + make_interval(secs => $4::double precision),
                                r.created_at + make_interval(secs => $5::double precision)),
                          clock.now),
        ready_at = greatest(least(clock.now + make_interval(secs => $4::double precision),
                                  r.created_at + make_interval(secs => $5::double precision)),
                            clock.now),
        state = CASE WHEN r.created_at + make_interval(secs => $5::double precision)
                          <= clock.now
                     THEN 'ready' ELSE 'scheduled' END,
        updated_at = clock.now
    FROM unnest($1::bigint[], $2::jsonb[], $3::smallint[]) AS d(id, payload, priority), clock
    WHERE r.id = d.id AND r.state IN ('scheduled', 'ready') AND r.attempt = 0
    RETURNING r.id, r.tenant, r.job, r.queue, r.priority, r.state, r.origin, r.attempt,
              r.max_attempts, r.retry_base, r.retry_max, r.timeout_seconds, r.due_at,
              r.ready_at, r.start_deadline, r.idempotency_key, r.payload, r.fencing_token,
              r.lease_owner, r.leased_at, r.lease_expires_at, r.deadline,
              r.cancel_requested, r.last_error, r.created_at, r.updated_at,
              r.finished_at, r.concurrency, r.request_fingerprint
), marked AS (
    -- Status: the job's next run moved (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM pushed
    ON CONFLICT DO NOTHING
), notified AS (
    SELECT count(pg_notify('tickwork_ready', current_schema() || ' ' || queue)) AS sent
    FROM pushed
    WHERE state = 'ready'
)
SELECT pushed.id, pushed.tenant, pushed.job, pushed.queue, pushed.priority, pushed.state,
       pushed.origin, pushed.attempt, pushed.max_attempts, pushed.retry_base,
       pushed.retry_max, pushed.timeout_seconds, pushed.due_at, pushed.ready_at,
       pushed.start_deadline, pushed.idempotency_key, pushed.payload,
       pushed.fencing_token, pushed.lease_owner, pushed.leased_at,
       pushed.lease_expires_at, pushed.deadline, pushed.cancel_requested,
       pushed.last_error, pushed.created_at, pushed.updated_at, pushed.finished_at,
       pushed.concurrency, pushed.request_fingerprint
FROM pushed, notified

-- name: answer_run_keys
-- The Idempotency-Keys $3 of enqueues that another enqueue's run answered (deduplicated
-- or debounced), each with its request's fingerprint $5: repeating such a request
-- answers that run again. A key taken meanwhile keeps its run.
INSERT INTO run_keys (tenant, job, idempotency_key, run_id, created_at, request_fingerprint)
SELECT $1, $2, k.key, k.run_id, coalesce($6::timestamptz, now()), k.fingerprint
FROM unnest($3::text[], $4::bigint[], $5::bytea[]) AS k(key, run_id, fingerprint)
ON CONFLICT DO NOTHING

-- name: forget_old_enqueue_keys
-- A key whose run is no longer live and that was taken before $1 (the horizon run_keys
-- are kept for, longer than any unique.forSeconds) holds nothing any more.
DELETE FROM enqueue_keys AS k
WHERE k.taken_at < $1
  AND NOT EXISTS (SELECT 1 FROM live_runs AS r WHERE r.id = k.run_id)
