-- The dead-letter queue: dead runs, replay and discard.

-- name: dead_runs
-- A tenant's dead runs, newest death first; ($3, $4) is the keyset cursor.
SELECT *
FROM runs
WHERE state = 'dead' AND tenant = $1
  AND ($2::text IS NULL OR job = $2)
  AND ($3::timestamptz IS NULL OR (finished_at, id) < ($3, $4::bigint))
ORDER BY finished_at DESC, id DESC
LIMIT $5

-- name: replay_dead
-- Re-enqueue with a fresh attempt budget.
UPDATE runs
SET state = 'ready',
    attempt = 0,
    ready_at = coalesce($2::timestamptz, now()),
    start_deadline = NULL,
    finished_at = NULL,
    cancel_requested = false,
    updated_at = coalesce($2::timestamptz, now())
WHERE id = $1 AND state = 'dead'
RETURNING *

-- name: discard_dead
UPDATE runs
SET state = 'discarded', updated_at = coalesce($2::timestamptz, now())
WHERE id = $1 AND state = 'dead'
RETURNING *
