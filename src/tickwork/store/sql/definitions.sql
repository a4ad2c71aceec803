-- Job definitions.

-- name: definition_for_update
SELECT * FROM definitions WHERE tenant = $1 AND name = $2 FOR UPDATE

-- name: definition_for_share
-- Enqueue holds the definition so a concurrent delete cannot orphan the new run.
SELECT * FROM definitions WHERE tenant = $1 AND name = $2 FOR SHARE

-- name: definition
SELECT * FROM definitions WHERE tenant = $1 AND name = $2

-- name: upsert_definition
-- (xmax = 0) is true for a row this statement inserted, false for an update.
WITH clock AS (
    SELECT coalesce($8::timestamptz, now()) AS now
)
INSERT INTO definitions AS d (tenant, name, spec, queue, priority, paused, next_due_at,
                              created_at, updated_at)
SELECT $1, $2, $3::jsonb, $4, $5, $6, $7, clock.now, clock.now
FROM clock
ON CONFLICT (tenant, name) DO UPDATE
SET spec = EXCLUDED.spec,
    queue = EXCLUDED.queue,
    priority = EXCLUDED.priority,
    paused = EXCLUDED.paused,
    next_due_at = EXCLUDED.next_due_at,
    generation = d.generation + 1,
    updated_at = EXCLUDED.updated_at
RETURNING *, (xmax = 0) AS inserted

-- name: delete_definition
DELETE FROM definitions WHERE tenant = $1 AND name = $2 RETURNING name

-- name: set_paused
-- next_due_at is kept: on resume the materialiser finds the fire times missed while
-- paused and applies the job's missedRunPolicy to them.
UPDATE definitions
SET paused = $3,
    spec = jsonb_set(spec, '{paused}', to_jsonb($3::boolean)),
    generation = CASE WHEN paused = $3 THEN generation ELSE generation + 1 END,
    updated_at = CASE WHEN paused = $3 THEN updated_at
                      ELSE coalesce($4::timestamptz, now()) END
WHERE tenant = $1 AND name = $2
RETURNING *

-- name: definitions_of_tenant
-- Keyset by name; the cross-shard merge takes the first `limit` of all shards.
SELECT *
FROM definitions
WHERE tenant = $1 AND ($2::text IS NULL OR name > $2)
ORDER BY name
LIMIT $3
