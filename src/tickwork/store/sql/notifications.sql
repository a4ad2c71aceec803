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
