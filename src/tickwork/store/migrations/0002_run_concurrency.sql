-- tickwork shard schema, version 2: per-job concurrency limits at claim time.
-- Each run carries its job's limit (0 = unlimited), copied when the run is created, so
-- the claim query needs no join; a constant default makes this an instant change.

ALTER TABLE runs
    ADD COLUMN concurrency integer NOT NULL DEFAULT 0 CHECK (concurrency >= 0);
