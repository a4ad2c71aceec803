-- tickwork shard schema, version 6: what the Kubernetes operator needs.
--
-- definitions.managed_by: where a definition is declared when not through the HTTP API
-- (a ScheduledJob object, or a manifest file of tickwork dev). The API refuses to change
-- or delete such a definition, and the operator's resync at start removes the ones whose
-- object is gone, and only those. A partial index keeps that scan to managed jobs.
-- Nullable without a default: an instant change on a large table.

ALTER TABLE definitions
    ADD COLUMN managed_by text CHECK (managed_by IN ('kubernetes', 'manifests'));
CREATE INDEX definitions_managed ON definitions (managed_by, tenant, name)
    WHERE managed_by IS NOT NULL;

-- How many missed fire times catch-ups have inserted (cumulative): the operator posts a
-- MissedRunsCaughtUp Event when it grows.
ALTER TABLE definitions ADD COLUMN missed_caught_up bigint NOT NULL DEFAULT 0;

-- The jobs whose status may have changed since the operator last looked: one row per
-- job, whatever the number of changes. Each statement that changes runs (or a
-- definition) adds its jobs with ON CONFLICT DO NOTHING, which writes nothing while the
-- job's row is there: the hot path pays one index probe per job per statement. The
-- operator's status pass drains the rows (DELETE ... RETURNING) every --status-interval,
-- so its reads and status writes follow the jobs that changed, never all jobs; without
-- an operator the table holds at most one row per job.
CREATE TABLE changed_jobs (
    tenant  text NOT NULL,
    job     text NOT NULL,
    PRIMARY KEY (tenant, job)
);

-- A live run of a job in dry-run mode (spec.dryRun): its lease says so, and workers give
-- it only to handlers that support dry runs. Copied into each run when it is created
-- (and updated on the runs not leased yet when the job switches), like its concurrency,
-- so the claim reads it from the row it leases. Only live runs carry it: a dead run
-- replayed takes the mode its job is in then. A constant default: an instant change.
ALTER TABLE live_runs ADD COLUMN dry_run boolean NOT NULL DEFAULT false;

-- A job's dead runs, counted by the status pass (and GET /v1/jobs) for each job that
-- changed: without it the count walked every dead run of the tenant.
CREATE INDEX finished_runs_dead_by_job ON finished_runs (tenant, job) WHERE state = 'dead';
