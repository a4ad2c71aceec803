-- tickwork shard schema, version 3: the fingerprint of the request that enqueued a run
-- with an Idempotency-Key, so a reused key with a different body is told apart from an
-- honest retry (the IETF Idempotency-Key draft answers 422 to the former).
-- Nullable and without a default: an instant change on a large table.

ALTER TABLE runs ADD COLUMN request_fingerprint bytea;
