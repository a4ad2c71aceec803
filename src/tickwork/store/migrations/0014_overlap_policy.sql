-- tickwork shard schema, version 14: overlap policies of scheduled fires.
-- compatible-from: 13
--
-- live_runs.overlap: the overlapPolicy (Forbid or Replace) of the job a scheduled fire
-- was materialised for; NULL for Allow and for every run not materialised from a
-- schedule. The due flip decides such a fire apart, under a lock per job, and the
-- partial index keeps finding them proportional to those fires alone.
-- definitions.overlap_skipped: the fires Forbid skipped (cumulative), for the job's
-- status. Nullable or with a default: instant changes, no row rewritten.

ALTER TABLE live_runs ADD COLUMN overlap text;
CREATE INDEX live_runs_overlap_due ON live_runs (ready_at)
    WHERE state = 'scheduled' AND overlap IS NOT NULL;

ALTER TABLE definitions ADD COLUMN overlap_skipped bigint NOT NULL DEFAULT 0;
