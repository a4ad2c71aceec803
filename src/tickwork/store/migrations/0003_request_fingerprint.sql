-- tickwork shard schema, version 3: what an idempotency key was first used for.
-- An ad hoc run enqueued with an Idempotency-Key keeps a SHA-256 of its request, so a
-- second request with the same key and a different body is refused (422) instead of
-- silently answering the first run. NULL for cron runs, runs without a key, and runs
-- made before this version (their key matches any request, as before).

ALTER TABLE runs ADD COLUMN request_fingerprint bytea;
