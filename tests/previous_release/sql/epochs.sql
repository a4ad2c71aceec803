-- The shard's scheduler epoch (fencing of scheduler writes). The lease of a shard says
-- who SHOULD schedule it; this row says whose writes count.

-- name: take_epoch
-- A new owner moves the epoch on before its first write. The update waits for the
-- transactions in flight that checked the old epoch (they hold the row FOR SHARE),
-- so no write of the old epoch commits after this one. No row while a reshard that
-- has not finished holds the shard: nobody schedules a shard half moved.
UPDATE shard_epoch
SET epoch = epoch + 1,
    owner = $1,
    acquired_at = coalesce($2::timestamptz, now())
WHERE NOT EXISTS (SELECT 1 FROM reshard_journal WHERE phase = 'moving')
RETURNING epoch, owner, acquired_at

-- name: check_epoch
-- The first statement of every scheduler transaction: no row when the epoch moved on
-- (the writer was deposed). The row stays locked FOR SHARE until the transaction ends,
-- so a takeover waits for it; $2 ends the session if it then stalls inside the
-- transaction (its process paused or cut off) for longer than that.
SELECT epoch, set_config('idle_in_transaction_session_timeout', $2::text, true) AS idle
FROM shard_epoch
WHERE epoch = $1
FOR SHARE

-- name: current_epoch
SELECT epoch, owner, acquired_at FROM shard_epoch

-- name: record_pass
-- The end of a pass of the epoch's holder; no row when the epoch moved on (the write
-- of a deposed owner counts for nothing, like its other writes).
UPDATE shard_epoch
SET last_pass_at = coalesce($2::timestamptz, now())
WHERE epoch = $1
RETURNING last_pass_at

-- name: epoch_lock_timeout
-- How long a takeover waits for the old epoch's transactions in flight.
SELECT set_config('lock_timeout', $1::text, true)

-- name: end_old_epoch_sessions
-- Sessions still inside a transaction that checked an older epoch (only scheduler
-- transactions lock shard_epoch) hold up a takeover: end them. Their process was
-- deposed, and its transaction writes nothing.
SELECT l.pid, pg_terminate_backend(l.pid) AS ended
FROM pg_locks AS l
WHERE l.locktype = 'relation'
  AND l.relation = 'shard_epoch'::regclass
  AND l.granted
  AND l.pid <> pg_backend_pid()
