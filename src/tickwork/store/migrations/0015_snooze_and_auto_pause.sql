-- tickwork shard schema, version 15: snoozed runs and jobs paused after consecutive dead runs.
-- compatible-from: 13
--
-- Expand only: the code of release 13 runs against it as it did. It writes none of
-- what is added here and reads nothing that changes (a snoozed run waits in
-- `retry_wait` as a retried run does; the attempt it snoozed is one more row of its
-- history).
--
-- live_runs.snoozes: how many times a worker snoozed the run (completion outcome
-- `snoozed`), checked against the limit in the completion's statement. With a
-- default: an instant change, no row rewritten.
-- attempts.outcome gains `snoozed`: the record of a lease that ended in a snooze. The
-- check is replaced in place (the same name, a wider list); validating it reads the
-- attempts once, which the previous list already allowed.
-- definitions.consecutive_dead: the job's runs that went dead since its last succeeded
-- run (or its last resume); spec.pauseAfterFailures pauses the job when it reaches it.
-- definitions.paused_reason: why the job is paused when tickwork paused it (NULL: not
-- paused, or paused by someone): the count, the last dead run, its error and when. A
-- state beside `paused`: a ScheduledJob's spec applied again does not lift it.

ALTER TABLE live_runs ADD COLUMN snoozes integer NOT NULL DEFAULT 0;

ALTER TABLE attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'lease-expired', 'cancelled', 'snoozed'));

ALTER TABLE definitions ADD COLUMN consecutive_dead integer NOT NULL DEFAULT 0;
ALTER TABLE definitions ADD COLUMN paused_reason jsonb;
