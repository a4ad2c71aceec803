-- tickwork shard schema, version 13: the fields a run takes from its job, in one place.
--
-- An enqueue reads its job's definition inside the statement that inserts the runs
-- (one round trip), so the run's fields come from the stored spec document rather than
-- from JobSpec in Python. A document written before a field existed lacks it: the view
-- gives JobSpec's default then (tests pin these defaults to JobSpec's). Both enqueue
-- statements read it with FOR SHARE, which locks the definition row beneath.

CREATE VIEW definition_run_fields AS
SELECT tenant, name, queue, priority,
       coalesce((spec #>> '{retry,maxAttempts}')::integer, 3) AS max_attempts,
       coalesce((spec #>> '{retry,baseSeconds}')::double precision, 30) AS retry_base,
       coalesce((spec #>> '{retry,maxSeconds}')::double precision, 1800) AS retry_max,
       coalesce((spec ->> 'timeoutSeconds')::integer, 3600) AS timeout_seconds,
       coalesce((spec ->> 'concurrency')::integer, 0) AS concurrency,
       coalesce((spec ->> 'dryRun')::boolean, false) AS dry_run,
       spec -> 'payload' AS payload
FROM definitions;
