-- tickwork shard schema, version 21: the jobs that watch their runs' deadlines and
-- leases, and the delivered notifications of the audit log.
-- compatible-from: 13
--
-- Expand only: two indexes, which the code of release 13 never reads.
--
-- The scheduler looks for overdue runs of the jobs whose notify names a deadline or a
-- lease limit (notifications.sql, watched_runs) every few seconds: this partial index
-- holds those few jobs, so the look is not a scan of every definition.

CREATE INDEX definitions_notify_watched ON definitions (tenant, name)
    WHERE spec -> 'notify' ?| array['deadline', 'leasedLongerThanSeconds'];

-- The dashboard's Notifications page lists a tenant's newest deliveries (audit.sql,
-- audit_notifications): among a long log of changes, these entries only.
CREATE INDEX audit_log_notify ON audit_log (tenant, at DESC, id DESC)
    WHERE action = 'notify';
