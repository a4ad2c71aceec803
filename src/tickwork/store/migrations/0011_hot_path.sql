-- tickwork shard schema, version 11: a cheaper hot path.
--
-- A run that succeeds writes no attempt row.
-- Its finished row already holds its last attempt (number, fencing token, worker,
-- lease and finish times), and the attempt row was a fifth of the cost of a completion
-- (a heap tuple and an index entry per run, on the hottest statement). `attempts` now
-- keeps the attempts that did not end their run successfully (failed, lease expired,
-- cancelled), and `run_attempts` reads every attempt: those rows, and the last attempt
-- of each succeeded run taken from its finished row. Runs that succeeded before this
-- version have their attempt row, which run_attempts prefers. Both live in day
-- partitions of the same finish time, so retention drops them together.

CREATE VIEW run_attempts AS
SELECT run_id, attempt, fencing_token, worker_id, leased_at, finished_at, outcome,
       result_state, next_attempt_at, error
FROM attempts
UNION ALL
SELECT f.id, f.attempt, f.fencing_token, f.lease_owner, f.leased_at, f.finished_at,
       'succeeded', 'succeeded', NULL::timestamptz, NULL::jsonb
FROM finished_runs AS f
WHERE f.state = 'succeeded' AND f.fencing_token IS NOT NULL AND f.leased_at IS NOT NULL
  AND NOT EXISTS (SELECT 1
                  FROM attempts AS a
                  WHERE a.run_id = f.id AND a.fencing_token = f.fencing_token);

-- enqueue_buckets.taken: how many tokens the last take got. A dispatcher takes a small
-- allowance ahead (up to $6 tokens, at least the call's runs) and admits from it
-- locally for a moment, so most enqueues make no round trip to the bucket.
ALTER TABLE enqueue_buckets ADD COLUMN taken double precision NOT NULL DEFAULT 0;
