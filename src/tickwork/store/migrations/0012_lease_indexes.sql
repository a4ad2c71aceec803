-- tickwork shard schema, version 12: a lease grant writes one index entry fewer.
--
-- Granting a lease rewrites the run's row (its state is in the partial indexes' predicates,
-- so the update is never HOT), and every index whose predicate the new row meets gets an
-- entry: the primary key, live_runs_by_job and live_runs_leased. live_runs_by_job now
-- leaves the leased runs out, and live_runs_leased, which holds exactly those, takes its
-- columns, so the runs of a job are the two indexes together (the `runs` view reads
-- live_runs in those two parts). Draining one tenant's backlog, a grant's server time fell
-- by about a fifth.

DROP INDEX live_runs_by_job;
CREATE INDEX live_runs_by_job ON live_runs (tenant, job, id DESC) WHERE state <> 'leased';
DROP INDEX live_runs_leased;
CREATE INDEX live_runs_leased ON live_runs (tenant, job, id DESC) WHERE state = 'leased';

CREATE OR REPLACE VIEW runs AS
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts, retry_base,
       retry_max, timeout_seconds, due_at, ready_at, start_deadline, idempotency_key,
       payload, fencing_token, lease_owner, leased_at, lease_expires_at, deadline,
       cancel_requested, last_error, created_at, updated_at, finished_at, concurrency,
       request_fingerprint
FROM live_runs
WHERE state <> 'leased'
UNION ALL
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts, retry_base,
       retry_max, timeout_seconds, due_at, ready_at, start_deadline, idempotency_key,
       payload, fencing_token, lease_owner, leased_at, lease_expires_at, deadline,
       cancel_requested, last_error, created_at, updated_at, finished_at, concurrency,
       request_fingerprint
FROM live_runs
WHERE state = 'leased'
UNION ALL
SELECT id, tenant, job, queue, priority, state, origin, attempt, max_attempts, retry_base,
       retry_max, timeout_seconds, due_at, ready_at, start_deadline, idempotency_key,
       payload, fencing_token, lease_owner, leased_at, lease_expires_at, deadline,
       cancel_requested, last_error, created_at, updated_at, finished_at, concurrency,
       request_fingerprint
FROM finished_runs;
