-- The dashboard's aggregates of one tenant on one shard. $2 is the start of the window
-- (the engine reads the clock); every query reads only that window or one state.

-- name: overview_runs
-- One pass over the tenant's runs touched since $2, counting per minute of the window
-- (0 = the minute $2 starts): attempts started and runs succeeded, from each run's
-- latest attempt when that attempt succeeded or is in flight (the other attempts are
-- in overview_attempts); and the start lag (lease time minus ready time) of the latest
-- leases, as counts per priority in buckets 10 % wide from 1 ms ($3 = ln 1.1): shards
-- merge by adding counts, which percentiles cannot. A run's ready and lease times
-- belong together only while it is leased or finished (a retry moves ready_at on),
-- hence the states and leased_at >= ready_at. `grouping` tells the three counts apart.
WITH recent AS (
    SELECT priority,
           CASE WHEN state IN ('leased', 'succeeded') AND leased_at >= $2
                THEN floor(date_part('epoch', leased_at - $2) / 60)::integer END AS started,
           CASE WHEN state = 'succeeded' AND finished_at >= $2
                THEN floor(date_part('epoch', finished_at - $2) / 60)::integer END AS succeeded,
           CASE WHEN leased_at >= $2 AND leased_at >= ready_at
                     AND state IN ('leased', 'succeeded', 'dead', 'cancelled', 'discarded')
                THEN floor(ln(greatest(date_part('epoch', leased_at - ready_at),
                                       0.001) / 0.001) / $3)::integer END AS lag
    FROM runs
    WHERE tenant = $1
      AND (leased_at >= $2 OR finished_at >= $2)
)
SELECT GROUPING(started, succeeded, priority, lag) AS grouping, started, succeeded,
       priority, lag, count(*)::bigint AS runs
FROM recent
GROUP BY GROUPING SETS ((started), (succeeded), (priority, lag))

-- name: overview_attempts
-- The attempts that did not succeed, finished since $2 (the attempt history is pruned
-- to the window's day partitions): when they started and, per minute, how many failed
-- or lost their lease (a cancelled attempt started but did not fail).
WITH ended AS (
    SELECT CASE WHEN a.leased_at >= $2
                THEN floor(date_part('epoch', a.leased_at - $2) / 60)::integer END AS started,
           floor(date_part('epoch', a.finished_at - $2) / 60)::integer AS finished,
           a.outcome IN ('failed', 'lease-expired') AS failed
    FROM attempts AS a
    JOIN runs AS r ON r.id = a.run_id
    WHERE a.finished_at >= $2 AND a.outcome <> 'succeeded' AND r.tenant = $1
)
SELECT GROUPING(started, finished) AS grouping, started, finished,
       count(*)::bigint AS attempts, count(*) FILTER (WHERE failed)::bigint AS failed
FROM ended
GROUP BY GROUPING SETS ((started), (finished))

-- name: overview_backlog
-- Ready runs per queue and priority, with the oldest ready time.
SELECT queue, priority, count(*)::bigint AS ready, min(ready_at) AS oldest_ready_at
FROM runs
WHERE state = 'ready' AND tenant = $1
GROUP BY queue, priority

-- name: overview_dead
SELECT count(*)::bigint FROM runs WHERE state = 'dead' AND tenant = $1

-- name: shard_owner
-- Who holds the shard's scheduler epoch, since when (NULL: nobody took it), and when
-- its last pass ended.
SELECT epoch, owner, acquired_at, last_pass_at FROM shard_epoch

-- name: dead_jobs
-- Jobs of the tenant with runs in the DLQ, for the DLQ's job filter.
SELECT DISTINCT job FROM runs WHERE state = 'dead' AND tenant = $1 ORDER BY job LIMIT $2

-- name: shard_tenants
-- Tenants with at least one job on this shard, for an admin's tenant picker.
SELECT DISTINCT tenant FROM definitions ORDER BY tenant LIMIT $1

-- name: job_table
-- One page of a tenant's jobs, with their run counts and last result, as the dashboard
-- filters ($2: name contains, $3: queue, $4: 'all' | 'paused' | 'active' | 'running' |
-- 'dead') and sorts them ($5, '-' for descending; names last as the tie-break, in the
-- C collation the engine merges shards in). `total` counts every match.
WITH jobs AS (
    SELECT d.tenant, d.name, d.spec, d.queue, d.priority, d.paused, d.next_due_at,
           d.missed_dropped, d.generation, d.created_at, d.updated_at, d.managed_by,
           d.missed_caught_up, d.overlap_skipped,
           c.active,
           c.dead,
           c.next_scheduled,
           l.id AS last_id,
           l.finished_at AS last_finished_at,
           d.spec -> 'schedule' ->> 'timeZone' AS zone,
           least(d.next_due_at, c.next_scheduled) AS next_run_at
    FROM definitions AS d
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE state = 'leased') AS active,
               count(*) FILTER (WHERE state = 'dead') AS dead,
               min(due_at) FILTER (WHERE state = 'scheduled') AS next_scheduled
        FROM runs AS r
        WHERE r.tenant = d.tenant AND r.job = d.name
          AND r.state IN ('leased', 'dead', 'scheduled')
    ) AS c
    LEFT JOIN LATERAL (
        SELECT r.id, r.finished_at
        FROM runs AS r
        WHERE r.tenant = d.tenant AND r.job = d.name AND r.finished_at IS NOT NULL
        ORDER BY r.finished_at DESC, r.id DESC
        LIMIT 1
    ) AS l ON true
    WHERE d.tenant = $1
      AND ($2::text IS NULL OR strpos(d.name, $2) > 0)
      AND ($3::text IS NULL OR d.queue = $3)
), shown AS (
    SELECT *
    FROM jobs
    WHERE $4 = 'all'
       OR ($4 = 'paused' AND paused)
       OR ($4 = 'active' AND NOT paused)
       OR ($4 = 'running' AND active > 0)
       OR ($4 = 'dead' AND dead > 0)
)
SELECT *, count(*) OVER () AS total
FROM shown
ORDER BY
    CASE WHEN $5 = 'next' THEN next_run_at END ASC NULLS LAST,
    CASE WHEN $5 = '-next' THEN next_run_at END DESC NULLS LAST,
    CASE WHEN $5 = 'last' THEN last_finished_at END ASC NULLS LAST,
    CASE WHEN $5 = '-last' THEN last_finished_at END DESC NULLS LAST,
    CASE WHEN $5 = 'active' THEN active END ASC,
    CASE WHEN $5 = '-active' THEN active END DESC,
    CASE WHEN $5 = 'dead' THEN dead END ASC,
    CASE WHEN $5 = '-dead' THEN dead END DESC,
    CASE WHEN $5 = 'zone' THEN zone END COLLATE "C" ASC NULLS LAST,
    CASE WHEN $5 = '-zone' THEN zone END COLLATE "C" DESC NULLS LAST,
    CASE WHEN $5 = 'paused' THEN paused END ASC,
    CASE WHEN $5 = '-paused' THEN paused END DESC,
    CASE WHEN $5 = '-name' THEN name END COLLATE "C" DESC,
    name COLLATE "C" ASC
LIMIT $6
