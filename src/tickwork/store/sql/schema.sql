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
