-- tickwork shard schema, version 8: when the shard's scheduler last finished a pass.
--
-- The dashboard and operators read it next to the epoch's owner: an owner whose last
-- pass is old holds the shard without scheduling it (stalled, or its database slow).
-- The scheduler sets it at the end of each pass, fenced by its epoch like every
-- scheduler write, so a deposed owner cannot make a shard look scheduled.

ALTER TABLE shard_epoch ADD COLUMN last_pass_at timestamptz;
