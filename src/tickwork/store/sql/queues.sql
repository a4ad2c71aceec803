-- A tenant's queues: pausing and resuming one (every shard holds every pause; the
-- claim statements in leases.sql skip a paused queue's runs).

-- name: pause_queue
-- `paused` is true when this statement paused it (false: it was paused already, and the
-- first pause's time and actor stay).
INSERT INTO queue_pauses AS q (tenant, queue, paused_at, actor)
VALUES ($1, $2, coalesce($4::timestamptz, now()), $3)
ON CONFLICT (tenant, queue) DO UPDATE SET tenant = q.tenant
RETURNING paused_at, actor, (xmax = 0) AS paused

-- name: resume_queue
DELETE FROM queue_pauses WHERE tenant = $1 AND queue = $2 RETURNING paused_at

-- name: paused_queues_of_tenant
SELECT queue, paused_at, actor FROM queue_pauses WHERE tenant = $1 ORDER BY queue

-- name: queues_of_tenant
-- The queues the tenant's jobs on this shard name, with how many jobs name each.
SELECT queue, count(*)::integer AS jobs
FROM definitions
WHERE tenant = $1
GROUP BY queue

-- name: paused_queues
-- Every paused queue (for the tickwork_queue_paused gauge).
SELECT tenant, queue FROM queue_pauses
