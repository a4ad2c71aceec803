-- The jobs whose status may have changed: marked by the statements that change runs
-- and definitions, drained by the operator's status pass.

-- name: mark_changed_jobs
-- $1 tenants, $2 jobs (pairwise). Writes nothing for a job already marked.
INSERT INTO changed_jobs (tenant, job)
SELECT DISTINCT k.tenant, k.job
FROM unnest($1::text[], $2::text[]) AS k(tenant, job)
ON CONFLICT DO NOTHING

-- name: drain_changed_jobs
-- Up to $1 marked jobs of tenants $2 (NULL: every tenant), taken off the set.
DELETE FROM changed_jobs AS c
USING (SELECT tenant, job
       FROM changed_jobs
       WHERE $2::text[] IS NULL OR tenant = ANY($2::text[])
       ORDER BY tenant, job
       LIMIT $1) AS taken
WHERE c.tenant = taken.tenant AND c.job = taken.job
RETURNING c.tenant, c.job

-- name: current_snapshot
-- Which transactions are in flight now (pg_current_snapshot), as text.
SELECT pg_current_snapshot()::text

-- name: unfinished_of_snapshot
-- How many of the transactions in flight at snapshot $1 are still running.
SELECT count(*)
FROM pg_snapshot_xip($1::text::pg_snapshot) AS x(xid)
WHERE pg_xact_status(x.xid) = 'in progress'
