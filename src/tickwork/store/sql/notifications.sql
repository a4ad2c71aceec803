-- A tenant's notification targets (every shard holds every target: record_failures in
-- leases.sql names a notification's target from its own shard's copy).

-- name: clear_default_notification_target
-- Before a target becomes the default ($2 its name): the tenant's default until now
-- stops being one (one default per tenant). A statement of its own: the unique index
-- is checked row by row, before a later part of the same statement.
UPDATE notification_targets
SET is_default = false
WHERE tenant = $1 AND name <> $2 AND is_default

-- name: put_notification_target
-- Create or replace target $2 of tenant $1.
WITH clock AS (
    SELECT coalesce($8::timestamptz, now()) AS now
)
INSERT INTO notification_targets AS t (tenant, name, url, format, secret_ref, is_default,
                                       updated_at, actor)
SELECT $1, $2, $3, $4, $5::jsonb, $6, clock.now, $7
FROM clock
ON CONFLICT (tenant, name) DO UPDATE
SET url = excluded.url, format = excluded.format, secret_ref = excluded.secret_ref,
    is_default = excluded.is_default, updated_at = excluded.updated_at,
    actor = excluded.actor
RETURNING name, url, format, secret_ref, is_default, updated_at, actor

-- name: notification_target
SELECT name, url, format, secret_ref, is_default, updated_at, actor
FROM notification_targets
WHERE tenant = $1 AND name = $2

-- name: notification_targets_of_tenant
SELECT name, url, format, secret_ref, is_default, updated_at, actor
FROM notification_targets
WHERE tenant = $1
ORDER BY name

-- name: delete_notification_target
DELETE FROM notification_targets WHERE tenant = $1 AND name = $2 RETURNING name

-- name: all_notification_targets
-- Every target (a new shard's copy, when resharding).
SELECT tenant, name, url, format, secret_ref, is_default, updated_at, actor
FROM notification_targets

-- name: copy_notification_target
INSERT INTO notification_targets (tenant, name, url, format, secret_ref, is_default,
                                  updated_at, actor)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8)
ON CONFLICT (tenant, name) DO NOTHING

-- name: record_delivery
-- A notification delivered: an audit entry of the job it is about ($2), with the
-- delivery run ($3) and what was sent ($4).
INSERT INTO audit_log (at, tenant, job, run_id, action, actor, detail)
VALUES (coalesce($5::timestamptz, now()), $1, $2, $3, 'notify', 'tickwork', $4::jsonb)

-- name: watched_runs
-- Runs of this shard's jobs whose notify names a deadline or a lease limit, that may
-- need a notification not yet made ($1 now, $2 seconds back finished runs are looked
-- at, $3 at most this many of each kind, oldest first):
--   * deadlineMissed: runs due before now, live or finished not succeeded in the last
--     $2 seconds. The caller reads each one's deadline in the job's zone (Python's tz
--     database, as the cron engine does): oldest first, so a backlog of runs whose
--     deadline is still ahead never hides one whose deadline passed.
--   * leasedTooLong: attempts leased longer than the job's limit.
-- A run whose notification exists (its key in run_keys) is not found again. run_id is
-- the public one (core.shards.format_run_id), as the keys of record_failures use.
-- definitions_notify_watched keeps the scan to the jobs that watch.
WITH clock AS (
    SELECT coalesce($1::timestamptz, now()) AS now
), watched AS (
    SELECT d.tenant, d.name AS job, d.spec -> 'notify' AS notify,
           d.spec -> 'schedule' ->> 'timeZone' AS schedule_zone,
           coalesce(d.spec -> 'notify' ->> 'target', t.name) AS target
    FROM definitions AS d
    LEFT JOIN notification_targets AS t ON t.tenant = d.tenant AND t.is_default
    WHERE d.spec -> 'notify' ?| array['deadline', 'leasedLongerThanSeconds']
), deadline_runs AS (
    SELECT 'deadlineMissed' AS event, w.tenant, w.job, w.target, w.notify,
           w.schedule_zone, 'r' || m.shard || '-' || r.id AS run_id, r.state, r.due_at,
           r.attempt, r.leased_at, r.lease_owner
    FROM watched AS w
    CROSS JOIN clock
    CROSS JOIN LATERAL (
        SELECT l.id, l.state, l.due_at, l.attempt, l.leased_at, l.lease_owner
        FROM live_runs AS l
        WHERE l.tenant = w.tenant AND l.job = w.job AND l.due_at < clock.now
        UNION ALL
        SELECT f.id, f.state, f.due_at, f.attempt, f.leased_at, f.lease_owner
        FROM finished_runs AS f
        WHERE f.tenant = w.tenant AND f.job = w.job AND f.state <> 'succeeded'
          AND f.finished_at >= clock.now - make_interval(secs => $2)
          AND f.due_at < clock.now
    ) AS r
    CROSS JOIN shard_meta AS m
    WHERE w.notify ? 'deadline'
      AND w.target IS NOT NULL
      AND coalesce(w.notify -> 'on', '["deadlineMissed"]'::jsonb) ? 'deadlineMissed'
      AND NOT EXISTS (
          SELECT 1 FROM run_keys AS k
          WHERE k.tenant = w.tenant AND k.job = 'tickwork.notify'
            AND k.idempotency_key = 'notify/deadlineMissed/r' || m.shard || '-' || r.id)
    ORDER BY r.due_at, r.id
    LIMIT $3
), leased_runs AS (
    SELECT 'leasedTooLong' AS event, w.tenant, w.job, w.target, w.notify,
           w.schedule_zone, 'r' || m.shard || '-' || l.id AS run_id, l.state, l.due_at,
           l.attempt, l.leased_at, l.lease_owner
    FROM watched AS w
    CROSS JOIN clock
    JOIN live_runs AS l ON l.tenant = w.tenant AND l.job = w.job AND l.state = 'leased'
    CROSS JOIN shard_meta AS m
    WHERE w.notify ? 'leasedLongerThanSeconds'
      AND w.target IS NOT NULL
      AND coalesce(w.notify -> 'on', '["leasedTooLong"]'::jsonb) ? 'leasedTooLong'
      AND l.leased_at <= clock.now - make_interval(
          secs => (w.notify ->> 'leasedLongerThanSeconds')::double precision)
      AND NOT EXISTS (
          SELECT 1 FROM run_keys AS k
          WHERE k.tenant = w.tenant AND k.job = 'tickwork.notify'
            AND k.idempotency_key = 'notify/leasedTooLong/r' || m.shard || '-' || l.id
                                    || '/' || l.attempt)
    ORDER BY l.leased_at, l.id
    LIMIT $3
)
SELECT * FROM deadline_runs
UNION ALL
SELECT * FROM leased_runs

-- name: enqueue_notifications
-- Notifications found by a sweep ($1 tenants, $2 keys, $3 bodies, pairwise; $4 now):
-- runs of the system job, made as record_failures (leases.sql) makes those of dead
-- runs, with the same retry. A key already taken makes nothing. Returns the count made.
WITH clock AS (
    SELECT coalesce($4::timestamptz, now()) AS now
), planned AS (
    SELECT nextval('run_ids') AS id, n.tenant, n.key, n.body
    FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS n(tenant, key, body)
), claimed AS (
    INSERT INTO run_keys (tenant, job, idempotency_key, run_id, created_at)
    SELECT p.tenant, 'tickwork.notify', p.key, p.id, clock.now
    FROM planned AS p, clock
    ON CONFLICT DO NOTHING
    RETURNING run_id
), deliveries AS (
    INSERT INTO live_runs (id, tenant, job, queue, priority, state, origin, max_attempts,
                           retry_base, retry_max, timeout_seconds, due_at, ready_at,
                           idempotency_key, payload, created_at, updated_at)
    SELECT p.id, p.tenant, 'tickwork.notify', 'tickwork-notifications', 0, 'ready', 'api',
           20, 5, 300, 60, clock.now, clock.now, p.key, p.body, clock.now, clock.now
    FROM planned AS p, clock
    WHERE p.id IN (SELECT run_id FROM claimed)
    RETURNING queue
)
SELECT (SELECT count(*) FROM deliveries) AS made,
       (SELECT count(pg_notify('tickwork_ready', current_schema() || ' ' || queue))
        FROM (SELECT DISTINCT queue FROM deliveries) AS q) AS sent
