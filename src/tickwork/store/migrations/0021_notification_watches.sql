-- tickwork shard schema, version 21: the jobs that watch their runs' deadlines and
-- leases.
-- compatible-from: 13
--
-- Expand only: an index, which the code of release 13 never reads.
--
-- The scheduler looks for overdue runs of the jobs whose notify names a deadline or a
-- lease limit (notifications.sql, watched_runs) every few seconds: this partial index
-- holds those few jobs, so the look is not a scan of every definition.

CREATE INDEX definitions_notify_watched ON definitions (tenant, name)
    WHERE spec -> 'notify' ?| array['deadline', 'leasedLongerThanSeconds'];
