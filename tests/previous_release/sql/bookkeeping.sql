-- Bookkeeping of the shard schema itself.

-- name: shard_identity
SELECT shard, shard_count FROM shard_meta

-- name: claim_shard_identity
INSERT INTO shard_meta (shard, shard_count) VALUES ($1, $2)
ON CONFLICT (singleton) DO NOTHING

-- name: applied_versions
SELECT version FROM schema_version ORDER BY version

-- name: record_version
INSERT INTO schema_version (version, name, compatible_from) VALUES ($1, $2, $3)

-- name: migration_lock
-- Held to the end of the migrating transaction: one migration of a database at a time.
SELECT pg_advisory_xact_lock($1)

-- name: create_schema_ddl
-- An identifier cannot be a parameter: the server quotes it (%I) into the statement.
SELECT format('CREATE SCHEMA IF NOT EXISTS %I', $1::text)

-- name: use_schema
-- SET LOCAL search_path, with the schema as a parameter quoted by the server.
SELECT set_config('search_path', quote_ident($1::text), true)

-- name: create_version_table
CREATE TABLE IF NOT EXISTS schema_version (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    compatible_from integer
)

-- name: add_compatible_from
-- compatible_from: the oldest code (by its schema version) that still runs against a
-- shard with this migration applied. Shards created before the column get it here.
ALTER TABLE schema_version ADD COLUMN IF NOT EXISTS compatible_from integer

-- name: schema_state
-- The shard's schema version (0: none yet) and the oldest code version that runs
-- against it. A migration recorded before compatible_from existed counts as compatible
-- with the code just before it; the column is read through to_jsonb so that this
-- statement works on a shard migrated before the column existed, too.
SELECT coalesce(max(v.version), 0) AS version,
       coalesce(max(coalesce((to_jsonb(v) ->> 'compatible_from')::integer, v.version - 1)),
                0) AS floor
FROM schema_version AS v

-- name: serving_identity
-- The shard's identity and an unfinished reshard, if any, in one round trip.
SELECT m.shard, m.shard_count, r.from_count, r.to_count
FROM shard_meta AS m
LEFT JOIN LATERAL (SELECT from_count, to_count
                   FROM reshard_journal
                   WHERE phase = 'moving'
                   LIMIT 1) AS r ON true
