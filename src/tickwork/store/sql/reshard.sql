-- Doubling the shard count (`tickwork reshard`): shard k of S splits into k and k + S,
-- one job at a time. A job's rows are copied to the new shard (binary COPY, so every
-- value arrives exactly as stored) in the new shard's transaction, then forgotten on
-- the source in the source's transaction, which records where its runs went
-- (moved_runs). Both steps may be repeated: a copy first clears what an interrupted
-- earlier copy of the job left behind.
-- A job's live runs are indexed in two parts, live_runs_by_job (not leased) and
-- live_runs_leased: `(state <> 'leased' OR state = 'leased')`, true of every row, lets
-- the planner read the job's runs through both (a BitmapOr) rather than the whole table.

-- name: reshard_next_job
-- The next job identity after ($1, $2) that has anything on this shard, in (tenant,
-- job) order: one index probe per table (a loose index scan), so walking the jobs
-- costs the number of jobs, not of rows.
SELECT tenant, job
FROM (
    (SELECT tenant, name AS job FROM definitions
     WHERE (tenant, name) > ($1, $2) ORDER BY tenant, name LIMIT 1)
    UNION ALL
    -- live_runs in the two parts its indexes by job hold (leased runs apart).
    (SELECT tenant, job FROM live_runs
     WHERE (tenant, job) > ($1, $2) AND state <> 'leased' ORDER BY tenant, job LIMIT 1)
    UNION ALL
    (SELECT tenant, job FROM live_runs
     WHERE (tenant, job) > ($1, $2) AND state = 'leased' ORDER BY tenant, job LIMIT 1)
    UNION ALL
    (SELECT tenant, job FROM finished_runs
     WHERE (tenant, job) > ($1, $2) ORDER BY tenant, job LIMIT 1)
    UNION ALL
    (SELECT tenant, job FROM run_keys
     WHERE (tenant, job) > ($1, $2) ORDER BY tenant, job LIMIT 1)
    UNION ALL
    (SELECT tenant, job FROM enqueue_keys
     WHERE (tenant, job) > ($1, $2) ORDER BY tenant, job LIMIT 1)
    UNION ALL
    (SELECT tenant, job FROM audit_log
     WHERE (tenant, job) > ($1, $2) ORDER BY tenant, job LIMIT 1)
    UNION ALL
    (SELECT tenant, job FROM changed_jobs
     WHERE (tenant, job) > ($1, $2) ORDER BY tenant, job LIMIT 1)
) AS candidates
ORDER BY tenant, job
LIMIT 1

-- name: reshard_job_size
-- What a job holds on this shard (the dry run's figures, and the move's).
SELECT (SELECT count(*) FROM definitions WHERE tenant = $1 AND name = $2) AS definitions,
       (SELECT count(*) FROM live_runs WHERE tenant = $1 AND job = $2 AND state <> 'leased')
       + (SELECT count(*) FROM live_runs WHERE tenant = $1 AND job = $2 AND state = 'leased')
           AS live_runs,
       (SELECT count(*) FROM finished_runs WHERE tenant = $1 AND job = $2) AS finished_runs

-- name: reshard_lock_job
-- The source's transaction holds the job's definition and live runs until the job is
-- forgotten there: an enqueue or a lease grant of the job waits rather than slip in
-- between the copy and the forgetting.
SELECT 1
FROM definitions
WHERE tenant = $1 AND name = $2
FOR UPDATE

-- name: reshard_lock_job_runs
SELECT id FROM live_runs WHERE tenant = $1 AND job = $2
  AND (state <> 'leased' OR state = 'leased') FOR UPDATE

-- name: reshard_copy_definitions
SELECT * FROM definitions WHERE tenant = $1 AND name = $2

-- name: reshard_copy_live_runs
SELECT * FROM live_runs WHERE tenant = $1 AND job = $2
  AND (state <> 'leased' OR state = 'leased')

-- name: reshard_copy_finished_runs
SELECT * FROM finished_runs WHERE tenant = $1 AND job = $2

-- name: reshard_copy_attempts
SELECT *
FROM attempts
WHERE run_id IN (SELECT id FROM live_runs WHERE tenant = $1 AND job = $2
                   AND (state <> 'leased' OR state = 'leased')
                 UNION ALL
                 SELECT id FROM finished_runs WHERE tenant = $1 AND job = $2)

-- name: reshard_copy_run_keys
SELECT * FROM run_keys WHERE tenant = $1 AND job = $2

-- name: reshard_copy_enqueue_keys
SELECT tenant, job, key, run_id, taken_at FROM enqueue_keys WHERE tenant = $1 AND job = $2

-- name: reshard_copy_audit_log
SELECT * FROM audit_log WHERE tenant = $1 AND job = $2

-- name: reshard_clear_job
-- On the new shard, before a copy: whatever an interrupted earlier copy of the job
-- left (nothing else of the job can be there: no role runs during a reshard).
WITH live AS (
    DELETE FROM live_runs WHERE tenant = $1 AND job = $2
        AND (state <> 'leased' OR state = 'leased')
    RETURNING id
), finished AS (
    DELETE FROM finished_runs WHERE tenant = $1 AND job = $2 RETURNING id
), attempt_rows AS (
    DELETE FROM attempts
    WHERE run_id IN (SELECT id FROM live UNION ALL SELECT id FROM finished)
    RETURNING 1
), definition_rows AS (
    DELETE FROM definitions WHERE tenant = $1 AND name = $2 RETURNING 1
), key_rows AS (
    DELETE FROM run_keys WHERE tenant = $1 AND job = $2 RETURNING 1
), enqueue_key_rows AS (
    DELETE FROM enqueue_keys WHERE tenant = $1 AND job = $2 RETURNING 1
), audit_rows AS (
    DELETE FROM audit_log WHERE tenant = $1 AND job = $2 RETURNING 1
)
SELECT (SELECT count(*) FROM live) + (SELECT count(*) FROM finished) AS runs,
       (SELECT count(*) FROM attempt_rows) + (SELECT count(*) FROM definition_rows)
       + (SELECT count(*) FROM key_rows) + (SELECT count(*) FROM enqueue_key_rows)
       + (SELECT count(*) FROM audit_rows) AS other_rows

-- name: reshard_mark_changed
-- The job's status names its shard, which changed: the operator's next status pass
-- rewrites it.
INSERT INTO changed_jobs (tenant, job) VALUES ($1, $2) ON CONFLICT DO NOTHING

-- name: reshard_forget_job
-- On the source, after the copy committed: the job's rows go, and each of its runs
-- leaves a forwarding row to the shard $3 that now holds it. Returns the runs moved.
WITH live AS (
    DELETE FROM live_runs WHERE tenant = $1 AND job = $2
        AND (state <> 'leased' OR state = 'leased')
    RETURNING id
), finished AS (
    DELETE FROM finished_runs WHERE tenant = $1 AND job = $2 RETURNING id
), moved AS (
    INSERT INTO moved_runs (run_id, shard, moved_at)
    SELECT id, $3, coalesce($4::timestamptz, now())
    FROM (SELECT id FROM live UNION ALL SELECT id FROM finished) AS runs
    ON CONFLICT (run_id) DO UPDATE SET shard = excluded.shard, moved_at = excluded.moved_at
    RETURNING run_id
), attempt_rows AS (
    DELETE FROM attempts
    WHERE run_id IN (SELECT id FROM live UNION ALL SELECT id FROM finished)
), definition_rows AS (
    DELETE FROM definitions WHERE tenant = $1 AND name = $2
), key_rows AS (
    DELETE FROM run_keys WHERE tenant = $1 AND job = $2
), enqueue_key_rows AS (
    DELETE FROM enqueue_keys WHERE tenant = $1 AND job = $2
), audit_rows AS (
    DELETE FROM audit_log WHERE tenant = $1 AND job = $2
), change_rows AS (
    DELETE FROM changed_jobs WHERE tenant = $1 AND job = $2
)
SELECT count(*) AS runs FROM moved

-- name: reshard_tenant_buckets
-- The enqueue rate buckets (one row per tenant, on the shard of the tenant's hash).
SELECT tenant, tokens, at, admitted FROM enqueue_buckets ORDER BY tenant

-- name: reshard_put_bucket
INSERT INTO enqueue_buckets (tenant, tokens, at, admitted)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant) DO UPDATE
SET tokens = excluded.tokens, at = excluded.at, admitted = excluded.admitted

-- name: reshard_forget_bucket
DELETE FROM enqueue_buckets WHERE tenant = $1

-- name: reshard_next_ids
-- The next value of each of the shard's sequences: run ids, fencing tokens, audit ids.
SELECT (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
        FROM run_ids) AS run_ids,
       (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
        FROM fencing_tokens) AS fencing_tokens,
       (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
        FROM audit_log_id_seq) AS audit_ids

-- name: reshard_raise_ids
-- The new shard hands out ids above the source's ($1 run ids, $2 fencing tokens, $3
-- audit ids): a moved run keeps its number, a new run never takes it, and the next
-- lease of a moved run gets a fencing token above the one its worker holds.
WITH current AS (
    SELECT (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
            FROM run_ids) AS run_ids,
           (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
            FROM fencing_tokens) AS fencing_tokens,
           (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
            FROM audit_log_id_seq) AS audit_ids
)
SELECT setval('run_ids', greatest($1::bigint, current.run_ids), false) AS run_ids,
       setval('fencing_tokens', greatest($2::bigint, current.fencing_tokens), false)
           AS fencing_tokens,
       setval('audit_log_id_seq', greatest($3::bigint, current.audit_ids), false)
           AS audit_ids
FROM current

-- name: reshard_journal
SELECT from_count, to_count, role, phase, moved_jobs, moved_runs, started_at, finished_at
FROM reshard_journal
ORDER BY to_count DESC

-- name: reshard_begin
-- Idempotent: a re-run finds its row and goes on.
INSERT INTO reshard_journal (from_count, to_count, role, phase, started_at)
VALUES ($1, $2, $3, 'moving', coalesce($4::timestamptz, now()))
ON CONFLICT (from_count, to_count) DO NOTHING

-- name: reshard_count_moved
UPDATE reshard_journal
SET moved_jobs = moved_jobs + 1, moved_runs = moved_runs + $3
WHERE from_count = $1 AND to_count = $2

-- name: reshard_finish
UPDATE reshard_journal
SET phase = 'done', finished_at = coalesce($3::timestamptz, now())
WHERE from_count = $1 AND to_count = $2 AND phase = 'moving'

-- name: reshard_set_shard_count
-- The source now belongs to an installation of $1 shards (the roles check it).
UPDATE shard_meta SET shard_count = $1

-- name: reshard_in_progress
SELECT from_count, to_count FROM reshard_journal WHERE phase = 'moving' LIMIT 1

-- name: moved_run_shards
-- Where runs ($1, local ids) that left this shard went: one row per id found.
SELECT run_id, shard FROM moved_runs WHERE run_id = ANY($1::bigint[])

-- name: reshard_other_sessions
-- Sessions of tickwork roles on this database connected to one of the shards $1 (their
-- application_name says which): a reshard waits for a maintenance window without them.
SELECT pid, application_name, client_addr::text AS client, backend_start
FROM pg_stat_activity
WHERE datname = current_database()
  AND application_name = ANY($1::text[])
  AND pid <> pg_backend_pid()
ORDER BY pid

-- name: reshard_paused_queues
-- Every shard holds every paused queue: a new shard gets its source shard's copy.
SELECT tenant, queue, paused_at, actor FROM queue_pauses

-- name: reshard_put_paused_queue
INSERT INTO queue_pauses (tenant, queue, paused_at, actor)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant, queue) DO NOTHING
