-- Bulk operations (one row per shard) and the runs they pick by filter.
--
-- The filter's parameters, the same in every statement that matches runs:
-- $1 tenant, $2 states (text[]), $3 job, $4 job LIKE pattern, $5 from (inclusive),
-- $6 to (exclusive), $7 error text (case-insensitive substring of the last error's
-- message), $8 min attempts, $9 max attempts, $10 cutoff (only runs dead by then, or
-- created by then: what existed when the operation was made; NULL: no cutoff).
-- Times are finishedAt for finished runs, dueAt for the others.

-- name: count_dead_matching
SELECT count(*)
FROM finished_runs
WHERE tenant = $1 AND state = 'dead' AND state = ANY($2::text[])
  AND ($3::text IS NULL OR job = $3)
  AND ($4::text IS NULL OR job LIKE $4)
  AND ($5::timestamptz IS NULL OR finished_at >= $5)
  AND ($6::timestamptz IS NULL OR finished_at < $6)
  AND ($7::text IS NULL OR strpos(lower(last_error ->> 'message'), lower($7)) > 0)
  AND ($8::integer IS NULL OR attempt >= $8)
  AND ($9::integer IS NULL OR attempt <= $9)
  AND ($10::timestamptz IS NULL OR finished_at <= $10)

-- name: count_live_matching
SELECT count(*)
FROM live_runs
WHERE tenant = $1 AND state = ANY($2::text[])
  AND ($3::text IS NULL OR job = $3)
  AND ($4::text IS NULL OR job LIKE $4)
  AND ($5::timestamptz IS NULL OR due_at >= $5)
  AND ($6::timestamptz IS NULL OR due_at < $6)
  AND ($7::text IS NULL OR strpos(lower(last_error ->> 'message'), lower($7)) > 0)
  AND ($8::integer IS NULL OR attempt >= $8)
  AND ($9::integer IS NULL OR attempt <= $9)
  AND ($10::timestamptz IS NULL OR created_at <= $10)

-- name: next_dead_batch
-- The next runs of an operation's batch: past the cursor ($11), in id order. The
-- literal state lets a generic plan use finished_runs_dead_by_id.
SELECT id, job, queue, state
FROM finished_runs
WHERE tenant = $1 AND state = 'dead' AND state = ANY($2::text[])
  AND ($3::text IS NULL OR job = $3)
  AND ($4::text IS NULL OR job LIKE $4)
  AND ($5::timestamptz IS NULL OR finished_at >= $5)
  AND ($6::timestamptz IS NULL OR finished_at < $6)
  AND ($7::text IS NULL OR strpos(lower(last_error ->> 'message'), lower($7)) > 0)
  AND ($8::integer IS NULL OR attempt >= $8)
  AND ($9::integer IS NULL OR attempt <= $9)
  AND ($10::timestamptz IS NULL OR finished_at <= $10)
  AND id > $11
ORDER BY id
LIMIT $12

-- name: next_live_batch
-- Locked, so a run's state read here holds while the batch acts on it.
SELECT id, job, queue, state
FROM live_runs
WHERE tenant = $1 AND state = ANY($2::text[])
  AND ($3::text IS NULL OR job = $3)
  AND ($4::text IS NULL OR job LIKE $4)
  AND ($5::timestamptz IS NULL OR due_at >= $5)
  AND ($6::timestamptz IS NULL OR due_at < $6)
  AND ($7::text IS NULL OR strpos(lower(last_error ->> 'message'), lower($7)) > 0)
  AND ($8::integer IS NULL OR attempt >= $8)
  AND ($9::integer IS NULL OR attempt <= $9)
  AND ($10::timestamptz IS NULL OR created_at <= $10)
  AND id > $11
ORDER BY id
LIMIT $12
FOR UPDATE

-- name: finished_runs_matching
-- A page of runs by state across jobs, newest first; ($11, $12) is the keyset bound.
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM finished_runs
WHERE tenant = $1 AND state = ANY($2::text[])
  AND ($3::text IS NULL OR job = $3)
  AND ($4::text IS NULL OR job LIKE $4)
  AND ($5::timestamptz IS NULL OR finished_at >= $5)
  AND ($6::timestamptz IS NULL OR finished_at < $6)
  AND ($7::text IS NULL OR strpos(lower(last_error ->> 'message'), lower($7)) > 0)
  AND ($8::integer IS NULL OR attempt >= $8)
  AND ($9::integer IS NULL OR attempt <= $9)
  AND ($10::timestamptz IS NULL OR finished_at <= $10)
  AND ($11::timestamptz IS NULL OR (finished_at, id) < ($11, $12::bigint))
ORDER BY finished_at DESC, id DESC
LIMIT $13

-- name: live_runs_matching
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts,
       retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
       idempotency_key, payload, fencing_token, lease_owner, leased_at,
       lease_expires_at, deadline, cancel_requested, last_error, created_at, updated_at,
       finished_at, concurrency, request_fingerprint
FROM live_runs
WHERE tenant = $1 AND state = ANY($2::text[])
  AND ($3::text IS NULL OR job = $3)
  AND ($4::text IS NULL OR job LIKE $4)
  AND ($5::timestamptz IS NULL OR due_at >= $5)
  AND ($6::timestamptz IS NULL OR due_at < $6)
  AND ($7::text IS NULL OR strpos(lower(last_error ->> 'message'), lower($7)) > 0)
  AND ($8::integer IS NULL OR attempt >= $8)
  AND ($9::integer IS NULL OR attempt <= $9)
  AND ($10::timestamptz IS NULL OR created_at <= $10)
  AND ($11::timestamptz IS NULL OR (due_at, id) < ($11, $12::bigint))
ORDER BY due_at DESC, id DESC
LIMIT $13

-- name: insert_operation
INSERT INTO operations (id, tenant, action, filter, state, total, actor, created_at,
                        updated_at, finished_at)
VALUES ($1, $2, $3, $4::jsonb, CASE WHEN $5::bigint = 0 THEN 'done' ELSE 'running' END,
        $5, $6, $7, $7, CASE WHEN $5::bigint = 0 THEN $7::timestamptz END)

-- name: operation_by_id
SELECT id, tenant, action, filter, state, total, processed, cursor, actor, created_at,
       updated_at, finished_at
FROM operations
WHERE id = $1 AND tenant = $2

-- name: lock_operation
SELECT id, tenant, action, filter, state, total, processed, cursor, actor, created_at,
       updated_at, finished_at
FROM operations
WHERE id = $1
FOR UPDATE

-- name: running_operations
-- Oldest first: operations of a shard are worked on one after another.
SELECT id
FROM operations
WHERE state = 'running'
ORDER BY created_at, id

-- name: recent_operations
SELECT id, tenant, action, filter, state, total, processed, cursor, actor, created_at,
       updated_at, finished_at
FROM operations
WHERE tenant = $1
ORDER BY created_at DESC, id DESC
LIMIT $2

-- name: advance_operation
-- One batch done: the cursor past its last run; done once a batch came back short.
UPDATE operations
SET cursor = $2, processed = processed + $3, updated_at = $5,
    state = CASE WHEN $4::boolean THEN 'done' ELSE state END,
    finished_at = CASE WHEN $4::boolean THEN $5::timestamptz ELSE finished_at END
WHERE id = $1

-- name: cancel_operation
-- What was done stays done; the rows of shards already done stay done.
UPDATE operations
SET state = 'cancelled', updated_at = coalesce($3::timestamptz, now()),
    finished_at = coalesce($3::timestamptz, now())
WHERE id = $1 AND tenant = $2 AND state = 'running'
