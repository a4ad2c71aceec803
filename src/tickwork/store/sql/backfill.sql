-- Backfill (engine/backfill.py makes the runs through store.materialise.insert_runs,
-- as the scheduler does; store.materialise runs this count too).

-- name: fire_times_taken
-- How many of the fire times $3 of the job have a run already (the scheduler's, or an
-- earlier backfill's): their keys are taken.
SELECT count(*)
FROM run_keys
WHERE tenant = $1 AND job = $2 AND due_at = ANY($3::timestamptz[])
