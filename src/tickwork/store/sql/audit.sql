-- The audit log: who changed what (definitions, pauses, enqueues, cancels, DLQ replays
-- and discards). Written by record_audit (runs.sql) in the transaction of the change.

-- name: audit_of_tenant
-- A tenant's entries, newest first. ($2, $3) is the keyset cursor, exclusive; without
-- one the bound is above every row, so the row comparison always serves as the index
-- condition (an `$2 IS NULL OR ...` would make PostgreSQL filter instead).
SELECT id, at, tenant, job, run_id, action, actor, detail
FROM audit_log
WHERE tenant = $1
  AND (at, id) < (coalesce($2::timestamptz, 'infinity'),
                  coalesce($3::bigint, 9223372036854775807))
ORDER BY at DESC, id DESC
LIMIT $4

-- name: audit_of_job
-- One job's entries, newest first; ($3, $4) as above.
SELECT id, at, tenant, job, run_id, action, actor, detail
FROM audit_log
WHERE tenant = $1 AND job = $2
  AND (at, id) < (coalesce($3::timestamptz, 'infinity'),
                  coalesce($4::bigint, 9223372036854775807))
ORDER BY at DESC, id DESC
LIMIT $5

-- name: audit_notifications
-- A tenant's delivered notifications (action notify), newest first: the partial index
-- audit_log_notify holds only those, however long the rest of the log is.
SELECT id, at, tenant, job, run_id, action, actor, detail
FROM audit_log
WHERE tenant = $1 AND action = 'notify'
ORDER BY at DESC, id DESC
LIMIT $2
