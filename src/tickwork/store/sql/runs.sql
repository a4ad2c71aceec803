-- Runs: enqueue, read, list, cancel.

-- name: insert_run
-- A run whose ready time has come is inserted `ready`, otherwise `scheduled`. A run
-- with an idempotency key first claims the key in run_keys (which outlives the run);
-- a second insert with the same key inserts nothing (the caller then reads the first
-- and compares $17, the request's fingerprint, with the one stored). $18: the job is in
-- dry-run mode. $19: who enqueues, recorded in the audit log (NULL: nothing recorded).
-- A run inserted ready wakes long-polling workers at commit: the audit entry and the
-- notification ride in this statement, not two more round trips.
WITH clock AS (
    SELECT coalesce($15::timestamptz, now()) AS now
), new AS (
    SELECT nextval('run_ids') AS id
), claimed_key AS (
    INSERT INTO run_keys (tenant, job, idempotency_key, run_id, created_at)
    SELECT $1, $2, $13, new.id, clock.now
    FROM new, clock
    WHERE $13::text IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING run_id
), inserted AS (
    INSERT INTO live_runs (id, tenant, job, queue, priority, state, origin, max_attempts,
                           retry_base, retry_max, timeout_seconds, due_at, ready_at,
                           start_deadline, idempotency_key, payload, created_at,
                           updated_at, concurrency, request_fingerprint, dry_run)
    SELECT new.id, $1, $2, $3, $4,
           CASE WHEN coalesce($11, clock.now) <= clock.now THEN 'ready' ELSE 'scheduled' END,
           $5, $6, $7, $8, $9,
           coalesce($10, clock.now), coalesce($11, clock.now), $12, $13, $14::jsonb,
           clock.now, clock.now, $16, $17, $18
    FROM new, clock
    WHERE $13::text IS NULL OR EXISTS (SELECT 1 FROM claimed_key)
    RETURNING *
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM inserted
    ON CONFLICT DO NOTHING
), audited AS (
    INSERT INTO audit_log (at, tenant, job, run_id, action, actor, detail)
    SELECT clock.now, inserted.tenant, inserted.job, inserted.id, 'enqueue', $19::text, NULL
    FROM inserted, clock
    WHERE $19::text IS NOT NULL
), notified AS (
    -- One row whatever it counts: joined below so that it runs.
    SELECT count(pg_notify('tickwork_ready', current_schema() || ' ' || queue)) AS sent
    FROM inserted
    WHERE state = 'ready'
)
SELECT inserted.id, inserted.tenant, inserted.job, inserted.queue, inserted.priority,
       inserted.state, inserted.origin, inserted.attempt, inserted.max_attempts,
       inserted.retry_base, inserted.retry_max, inserted.timeout_seconds,
       inserted.due_at, inserted.ready_at, inserted.start_deadline,
       inserted.idempotency_key, inserted.payload, inserted.fencing_token,
       inserted.lease_owner, inserted.leased_at, inserted.lease_expires_at,
       inserted.deadline, inserted.cancel_requested, inserted.last_error,
       inserted.created_at, inserted.updated_at, inserted.finished_at,
       inserted.concurrency, inserted.request_fingerprint, inserted.dry_run
FROM inserted, notified

-- name: new_run_ids
SELECT nextval('run_ids') AS id FROM generate_series(1, $1)

-- name: insert_runs
-- Many runs of one job in one statement ($1 the ids drawn by new_run_ids, $17 the
-- requests' fingerprints, $18 the job's dry-run mode); like insert_run, a run whose
-- idempotency key is taken is left out.
WITH clock AS (
    SELECT coalesce($15::timestamptz, now()) AS now
), new AS (
    SELECT *
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::smallint[],
                $6::text[], $7::integer[], $8::double precision[], $9::double precision[],
                $10::integer[], $11::timestamptz[], $12::timestamptz[], $13::text[],
                $14::jsonb[], $16::integer[], $17::bytea[])
         AS n(id, tenant, job, queue, priority, origin, max_attempts, retry_base,
              retry_max, timeout_seconds, due_at, ready_at, idempotency_key, payload,
              concurrency, request_fingerprint)
), claimed_keys AS (
    INSERT INTO run_keys (tenant, job, idempotency_key, run_id, created_at)
    SELECT tenant, job, idempotency_key, id, clock.now
    FROM new, clock
    WHERE idempotency_key IS NOT NULL
    ORDER BY id
    ON CONFLICT DO NOTHING
    RETURNING run_id
), inserted AS (
    INSERT INTO live_runs (id, tenant, job, queue, priority, state, origin, max_attempts,
                           retry_base, retry_max, timeout_seconds, due_at, ready_at,
                           idempotency_key, payload, created_at, updated_at, concurrency,
                           request_fingerprint, dry_run)
    SELECT new.id, new.tenant, new.job, new.queue, new.priority,
           CASE WHEN coalesce(new.ready_at, clock.now) <= clock.now THEN 'ready'
                ELSE 'scheduled' END,
           new.origin, new.max_attempts, new.retry_base, new.retry_max,
           new.timeout_seconds, coalesce(new.due_at, clock.now),
           coalesce(new.ready_at, clock.now), new.idempotency_key, new.payload, clock.now,
           clock.now, new.concurrency, new.request_fingerprint, $18::boolean
    FROM new, clock
    WHERE new.idempotency_key IS NULL
       OR new.id IN (SELECT run_id FROM claimed_keys)
    ORDER BY new.id
    RETURNING *
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM inserted
    ON CONFLICT DO NOTHING
)
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint, dry_run
FROM inserted ORDER BY id

-- name: run_by_key
SELECT r.id, r.tenant, r.job, r.queue, r.priority, r.state, r.origin, r.attempt,
       r.max_attempts, r.retry_base, r.retry_max, r.timeout_seconds, r.due_at,
       r.ready_at, r.start_deadline, r.idempotency_key, r.payload, r.fencing_token,
       r.lease_owner, r.leased_at, r.lease_expires_at, r.deadline, r.cancel_requested,
       r.last_error, r.created_at, r.updated_at, r.finished_at, r.concurrency,
       -- A key that answered another request's run keeps its own request's.
       coalesce(k.request_fingerprint, r.request_fingerprint) AS request_fingerprint
FROM run_keys AS k
JOIN runs AS r ON r.id = k.run_id
WHERE k.tenant = $1 AND k.job = $2 AND k.idempotency_key = $3

-- name: run_by_id
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM runs WHERE id = $1

-- name: runs_of_job
-- Newest first; $3 is the cursor (the last id seen), $4 an optional state filter.
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM runs
WHERE tenant = $1 AND job = $2
  AND ($3::bigint IS NULL OR id < $3)
  AND ($4::text IS NULL OR state = $4)
ORDER BY id DESC
LIMIT $5

-- name: attempts_of_run
-- In the order they happened: a run's tokens strictly increase, while attempt numbers
-- start again at 1 after a DLQ replay.
SELECT attempt, fencing_token, worker_id, leased_at, finished_at, outcome, error
FROM run_attempts
WHERE run_id = $1
ORDER BY fencing_token

-- name: lock_run
-- The live row, locked; else the finished one (finished rows change only through the
-- DLQ, which locks them itself).
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint, dry_run
FROM live_runs WHERE id = $1 FOR UPDATE

-- name: finished_run
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM finished_runs WHERE id = $1

-- name: runs_by_ids
-- Runs by id, wherever they are now (live or finished).
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM runs WHERE id = ANY($1::bigint[])

-- name: finished_runs_by_id
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM finished_runs WHERE id = ANY($1::bigint[])

-- name: cancel_pending
-- Runs not yet leased end as cancelled: they leave live_runs for the history.
WITH clock AS (
    SELECT coalesce($2::timestamptz, now()) AS now
), ended AS (
    DELETE FROM live_runs
    WHERE id = $1 AND state IN ('scheduled', 'ready', 'retry_wait')
    RETURNING *
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM ended
    ON CONFLICT DO NOTHING
)
INSERT INTO finished_runs
SELECT id, tenant, job, queue, priority, 'cancelled', origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at, lease_expires_at,
       deadline, cancel_requested, last_error, created_at, clock.now, clock.now,
       concurrency, request_fingerprint
FROM ended, clock
RETURNING id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
          retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
          idempotency_key, payload, fencing_token, lease_owner, leased_at,
          lease_expires_at, deadline, cancel_requested, last_error, created_at,
          updated_at, finished_at, concurrency, request_fingerprint

-- name: request_cancel
-- A leased run finishes its lease: its next heartbeat answers cancelRequested.
UPDATE live_runs
SET cancel_requested = true, updated_at = coalesce($2::timestamptz, now())
WHERE id = $1 AND state = 'leased'
RETURNING id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
          retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
          idempotency_key, payload, fencing_token, lease_owner, leased_at,
          lease_expires_at, deadline, cancel_requested, last_error, created_at,
          updated_at, finished_at, concurrency, request_fingerprint, dry_run

-- name: cancel_runs_of_job
-- Deleting a job: pending runs end as cancelled, leased runs are asked to stop.
WITH clock AS (
    SELECT coalesce($3::timestamptz, now()) AS now
), asked AS (
    UPDATE live_runs AS r
    SET cancel_requested = true, updated_at = clock.now
    FROM clock
    WHERE r.tenant = $1 AND r.job = $2 AND r.state = 'leased'
    RETURNING r.id, r.state
), ended AS (
    DELETE FROM live_runs
    WHERE tenant = $1 AND job = $2 AND state IN ('scheduled', 'ready', 'retry_wait')
    RETURNING *
), moved AS (
    INSERT INTO finished_runs
    SELECT id, tenant, job, queue, priority, 'cancelled', origin, attempt, max_attempts,
           retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
           idempotency_key, payload, fencing_token, lease_owner, leased_at,
           lease_expires_at, deadline, cancel_requested, last_error, created_at,
           clock.now, clock.now, concurrency, request_fingerprint
    FROM ended, clock
    RETURNING id, state
)
SELECT id, state FROM asked
UNION ALL
SELECT id, state FROM moved

-- name: job_run_counts
-- next_scheduled: the earliest materialised run still waiting for its time.
SELECT (SELECT count(*) FROM live_runs
        WHERE tenant = $1 AND job = $2 AND state = 'leased') AS active,
       (SELECT count(*) FROM finished_runs
        WHERE tenant = $1 AND job = $2 AND state = 'dead') AS dead,
       (SELECT min(due_at) FROM live_runs
        WHERE tenant = $1 AND job = $2 AND state = 'scheduled') AS next_scheduled

-- name: last_finished_run
-- The newest run of the job that has finished.
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM finished_runs
WHERE tenant = $1 AND job = $2
ORDER BY id DESC
LIMIT 1

-- name: run_summaries
-- The same figures for many jobs of one tenant in one statement (GET /v1/jobs).
SELECT j.job,
       (SELECT count(*) FROM live_runs AS r
        WHERE r.tenant = $1 AND r.job = j.job AND r.state = 'leased') AS active,
       (SELECT count(*) FROM finished_runs AS f
        WHERE f.tenant = $1 AND f.job = j.job AND f.state = 'dead') AS dead,
       (SELECT min(due_at) FROM live_runs AS r
        WHERE r.tenant = $1 AND r.job = j.job AND r.state = 'scheduled') AS next_scheduled,
       (SELECT f.id FROM finished_runs AS f
        WHERE f.tenant = $1 AND f.job = j.job
        ORDER BY f.id DESC LIMIT 1) AS last_id
FROM unnest($2::text[]) AS j(job)

-- name: record_audit
INSERT INTO audit_log (at, tenant, job, run_id, action, actor, detail)
VALUES (coalesce($7::timestamptz, now()), $1, $2, $3, $4, $5, $6::jsonb)

-- name: set_dry_run
-- A job switched in or out of dry-run mode: its runs not leased yet follow (a leased
-- run keeps the mode its handler was started in).
UPDATE live_runs
SET dry_run = $3
WHERE tenant = $1 AND job = $2
  AND state IN ('scheduled', 'ready', 'retry_wait')
  AND dry_run <> $3

-- name: insert_ready_runs
-- The common batch, in one statement and so one round trip (no BEGIN, no COMMIT): runs
-- of one job, ready now, without idempotency keys or times of their own. The job's
-- definition is read (and held FOR SHARE, so a concurrent delete cannot orphan a run)
-- in the statement, its fields taken from the stored spec (`definition_run_fields`:
-- JobSpec's defaults for a field an older document lacks); no definition, no row.
-- $3: the payloads, one JSON array (null: none), $4 the positions (from 1) of the runs
-- that take the job's payload instead; ids drawn in the payloads' order and answered in
-- it, no row read back. $5 now (NULL: the database's), $6 who enqueues: one audit entry
-- for the call, the changed-jobs mark and the wake-up of long-polling workers ride along.
WITH clock AS (
    SELECT coalesce($5::timestamptz, now()) AS now
), job AS (
    SELECT *
    FROM definition_run_fields
    WHERE tenant = $1 AND name = $2
      -- A job with a unique or debounce rule takes the keyed path (enqueue_keys.sql):
      -- no row here, as for no job, and the caller reads the definition to tell which.
      AND NOT EXISTS (SELECT 1 FROM definitions AS d
                      WHERE d.tenant = $1 AND d.name = $2
                        AND d.spec ?| array['unique', 'debounce'])
    FOR SHARE
), new AS (
    SELECT nextval('run_ids') AS id, p.payload, p.n
    FROM job, jsonb_array_elements($3::jsonb) WITH ORDINALITY AS p(payload, n)
), inserted AS (
    INSERT INTO live_runs (id, tenant, job, queue, priority, state, origin, max_attempts,
                           retry_base, retry_max, timeout_seconds, due_at, ready_at,
                           payload, created_at, updated_at, concurrency, dry_run)
    SELECT new.id, job.tenant, job.name, job.queue, job.priority, 'ready', 'api',
           job.max_attempts, job.retry_base, job.retry_max, job.timeout_seconds,
           clock.now, clock.now,
           CASE WHEN new.n = ANY($4::bigint[]) THEN job.payload
                ELSE nullif(new.payload, 'null'::jsonb) END,
           -- run_concurrency: > 0 for any flow control (read once: $1, $2, not job).
           clock.now, clock.now,
           run_concurrency((SELECT d.spec FROM definitions AS d
                            WHERE d.tenant = $1 AND d.name = $2)),
           job.dry_run
    FROM new, job, clock
    ORDER BY new.id
), marked AS (
    -- Status: this job's runs changed (nothing written when it is already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT tenant, name FROM job
    ON CONFLICT DO NOTHING
), audited AS (
    INSERT INTO audit_log (at, tenant, job, run_id, action, actor, detail)
    SELECT clock.now, job.tenant, job.name, NULL, 'enqueue', $6::text,
           jsonb_build_object('runs', (SELECT count(*) FROM new))
    FROM job, clock
), notified AS (
    -- Delivered at commit; the payload names the shard's schema (see notify_ready).
    SELECT pg_notify('tickwork_ready', current_schema() || ' ' || queue) AS sent FROM job
)
SELECT job.queue, job.priority, job.max_attempts, job.payload::text AS payload,
       clock.now, (SELECT array_agg(id ORDER BY n) FROM new) AS ids
FROM job, clock, notified

-- name: enqueue_run
-- One run of a job, in one statement and so one round trip: the definition read (FOR
-- SHARE) and its fields taken from the stored spec as insert_ready_runs does, the
-- idempotency key claimed, the run inserted, the job marked changed, the audit entry
-- written and long-polling workers woken at commit. No row when the job does not exist
-- or the key is taken (the caller tells which). $3 runAt, $4 delaySeconds (the ready
-- time: the later of runAt and now, or now plus the delay, or now), $5 the payload's
-- JSON text and $6 whether one was given (else the job's), $7 a priority rank over the
-- job's, $8 the idempotency key and $9 the request's fingerprint, $10 now (NULL: the
-- database's), $11 who enqueues.
WITH clock AS (
    SELECT coalesce($10::timestamptz, now()) AS now
), job AS (
    SELECT *
    FROM definition_run_fields
    WHERE tenant = $1 AND name = $2
      -- A job with a unique or debounce rule takes the keyed path (enqueue_keys.sql):
      -- no row here, as for no job, and the caller reads the definition to tell which.
      AND NOT EXISTS (SELECT 1 FROM definitions AS d
                      WHERE d.tenant = $1 AND d.name = $2
                        AND d.spec ?| array['unique', 'debounce'])
    FOR SHARE
), new AS (
    SELECT nextval('run_ids') AS id,
           CASE WHEN $3::timestamptz IS NOT NULL THEN greatest($3::timestamptz, clock.now)
                WHEN $4::double precision IS NOT NULL
                    THEN clock.now + make_interval(secs => $4::double precision)
                ELSE clock.now END AS ready_at
    FROM job, clock
), claimed_key AS (
    INSERT INTO run_keys (tenant, job, idempotency_key, run_id, created_at)
    SELECT $1, $2, $8, new.id, clock.now
    FROM new, clock
    WHERE $8::text IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING run_id
), inserted AS (
    INSERT INTO live_runs (id, tenant, job, queue, priority, state, origin, max_attempts,
                           retry_base, retry_max, timeout_seconds, due_at, ready_at,
                           idempotency_key, payload, created_at, updated_at, concurrency,
                           request_fingerprint, dry_run)
    SELECT new.id, job.tenant, job.name, job.queue, coalesce($7::smallint, job.priority),
           CASE WHEN new.ready_at <= clock.now THEN 'ready' ELSE 'scheduled' END, 'api',
           job.max_attempts, job.retry_base, job.retry_max, job.timeout_seconds,
           new.ready_at, new.ready_at, $8::text,
           CASE WHEN $6::boolean THEN $5::jsonb ELSE job.payload END,
           clock.now, clock.now,
           run_concurrency((SELECT d.spec FROM definitions AS d
                            WHERE d.tenant = $1 AND d.name = $2)),
           $9::bytea, job.dry_run
    FROM new, job, clock
    WHERE $8::text IS NULL OR EXISTS (SELECT 1 FROM claimed_key)
    RETURNING *
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM inserted
    ON CONFLICT DO NOTHING
), audited AS (
    INSERT INTO audit_log (at, tenant, job, run_id, action, actor, detail)
    SELECT clock.now, inserted.tenant, inserted.job, inserted.id, 'enqueue', $11::text, NULL
    FROM inserted, clock
), notified AS (
    -- One row whatever it counts: joined below so that it runs.
    SELECT count(pg_notify('tickwork_ready', current_schema() || ' ' || queue)) AS sent
    FROM inserted
    WHERE state = 'ready'
)
SELECT inserted.id, inserted.tenant, inserted.job, inserted.queue, inserted.priority,
       inserted.state, inserted.origin, inserted.attempt, inserted.max_attempts,
       inserted.retry_base, inserted.retry_max, inserted.timeout_seconds,
       inserted.due_at, inserted.ready_at, inserted.start_deadline,
       inserted.idempotency_key, inserted.payload, inserted.fencing_token,
       inserted.lease_owner, inserted.leased_at, inserted.lease_expires_at,
       inserted.deadline, inserted.cancel_requested, inserted.last_error,
       inserted.created_at, inserted.updated_at, inserted.finished_at,
       inserted.concurrency, inserted.request_fingerprint, inserted.dry_run
FROM inserted, notified
