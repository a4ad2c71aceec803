-- Partition maintenance: day partitions of attempts and finished_runs, retention.

-- name: partitions_of
-- The partitions of one table ($1) of the shard schema on the search path.
SELECT child.relname AS name
FROM pg_inherits
JOIN pg_class AS parent ON parent.oid = pg_inherits.inhparent
JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid
JOIN pg_namespace AS ns ON ns.oid = parent.relnamespace
WHERE parent.relname = $1 AND ns.nspname = current_schema()

-- name: table_exists
SELECT to_regclass($1) IS NOT NULL

-- name: utc_today
SELECT (coalesce($1::timestamptz, now()) AT TIME ZONE 'UTC')::date

-- name: delete_old_default_attempts
DELETE FROM attempts_default WHERE finished_at < $1

-- name: delete_old_default_finished_runs
DELETE FROM finished_runs_default WHERE finished_at < $1

-- name: forget_old_keys
-- A key outlives its run's retention only while the run is still live.
DELETE FROM run_keys AS k
WHERE k.created_at < $1
  AND NOT EXISTS (SELECT 1 FROM live_runs AS r WHERE r.id = k.run_id)

-- name: lock_shard_maintenance
-- One lock per shard schema (shards may share a database): the key hashes the schema.
SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/attempts', 0))

-- name: create_partition_ddl
-- DDL takes no bind parameters: the server quotes the names (%I) and the bounds (%L)
-- given as parameters, and the statement it returns is run as is.
SELECT format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
              $1::text, $4::text, $2::timestamptz, $3::timestamptz)

-- name: drop_partition_ddl
SELECT format('DROP TABLE IF EXISTS %I', $1::text)

-- name: forget_old_audit
-- One batch ($2 rows at most) of audit entries older than $1, oldest first; the
-- caller repeats until a batch comes back short, each in its own transaction.
DELETE FROM audit_log
WHERE id IN (SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)
