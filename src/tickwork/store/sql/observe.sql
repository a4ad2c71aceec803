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

-- name: auto_paused_between
-- Jobs spec.pauseAfterFailures paused in ($1, $2] (the audit log's auto-pause entries,
-- written in the transaction that paused them), per job.
SELECT tenant, job, count(*) AS paused
FROM audit_log
WHERE action = 'auto-pause'
  AND at > $1::timestamptz
  AND at <= $2::timestamptz
GROUP BY tenant, job

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

-- name: held_back_runs
-- Ready runs of jobs with flow control that their limit holds back now ($1 now; $2, $3
-- one job's tenant and name, or NULL for every job), per job and limit: `concurrency`
-- when the bucket of their concurrency key has as many leased runs as its limit (of
-- the key, or of the job for a job's own limit), else `rate` when the window of their
-- rate key is used up. The ready runs are grouped by bucket first: a count per bucket,
-- not per run.
WITH buckets AS (
    SELECT tenant, job, concurrency_key, rate_key, min(concurrency) AS concurrency,
           min(rate_limit) AS rate_limit, max(rate_period) AS rate_period,
           count(*)::integer AS ready
    FROM live_runs
    WHERE state = 'ready' AND concurrency > 0
      AND ($2::text IS NULL OR (tenant = $2 AND job = $3::text))
    GROUP BY tenant, job, concurrency_key, rate_key
), judged AS (
    SELECT b.tenant, b.job, b.ready,
           b.concurrency < 2147483647
           AND CASE WHEN b.concurrency_key IS NULL
                        THEN (SELECT count(*) FROM live_runs AS l
                              WHERE l.state = 'leased' AND l.concurrency > 0
                                AND l.tenant = b.tenant AND l.job = b.job
                                AND l.concurrency_key IS NULL)
                    ELSE (SELECT count(*) FROM live_runs AS l
                          WHERE l.state = 'leased' AND l.concurrency_key IS NOT NULL
                            AND l.tenant = b.tenant
                            AND l.concurrency_key = b.concurrency_key) END
               >= b.concurrency AS concurrency_full,
           b.rate_key IS NOT NULL
           AND coalesce((SELECT sum(w.leased) FROM rate_windows AS w
                         WHERE w.tenant = b.tenant AND w.key = b.rate_key
                           AND w.slot > coalesce($1::timestamptz, now())
                                        - make_interval(secs => b.rate_period)), 0)
               >= b.rate_limit AS rate_full
    FROM buckets AS b
)
SELECT tenant, job,
       CASE WHEN concurrency_full THEN 'concurrency' ELSE 'rate' END AS "limit",
       sum(ready)::integer AS runs
FROM judged
WHERE concurrency_full OR rate_full
GROUP BY tenant, job, 3
