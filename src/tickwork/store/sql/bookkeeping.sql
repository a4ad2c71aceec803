-- Bookkeeping of the shard schema itself.

-- name: shard_identity
SELECT shard, shard_count FROM shard_meta

-- name: claim_shard_identity
INSERT INTO shard_meta (shard, shard_count) VALUES ($1, $2)
ON CONFLICT (singleton) DO NOTHING

-- name: applied_versions
SELECT version FROM schema_version ORDER BY version

-- name: record_version
INSERT INTO schema_version (version, name) VALUES ($1, $2)

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
    applied_at  timestamptz NOT NULL DEFAULT now()
)
