-- What the scheduler reports about the shards it owns (engine/observer.py): backlog,
-- new dead runs, and the canary's recent runs. Reads only; none is on a hot path.

-- name: ready_backlog
-- Ready runs per tenant, queue and priority, and how long the oldest has waited ($1
-- now).
SELECT tenant,
       queue,
       priority,
       count(*) AS ready,
       greatest(extract(epoch FROM coalesce($1::timestamptz, now()) - min(ready_at)), 0)
           ::double precision AS oldest_seconds
FROM live_runs
WHERE state = 'ready'
GROUP BY tenant, queue, priority

-- name: dead_between
-- Runs that went dead in ($1, $2], per job: read through the partial index of dead
-- runs (dead runs are few next to the history) and the day partitions of $1..$2.
SELECT tenant, job, priority, count(*) AS dead
FROM finished_runs
WHERE state = 'dead'
  AND finished_at > $1::timestamptz
  AND finished_at <= $2::timestamptz
GROUP BY tenant, job, priority

-- name: canary_runs_since
-- The canary's runs due at or after $3, live or finished.
SELECT due_at, state, finished_at
FROM live_runs
WHERE tenant = $1 AND job = $2 AND due_at >= $3::timestamptz
UNION ALL
SELECT due_at, state, finished_at
FROM finished_runs
WHERE tenant = $1 AND job = $2 AND due_at >= $3::timestamptz
  AND finished_at >= $3::timestamptz
