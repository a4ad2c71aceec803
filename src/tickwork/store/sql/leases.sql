-- The worker path: claim, heartbeat, complete, release (the sweeps are in sweeps.sql).
-- $now parameters are NULL in production (database clock) and pinned in tests.

-- name: claim
-- One single-shard transaction, one statement. $1 queues, $2 batch, $3 worker, $4 now,
-- $5 lease seconds, $6 tenant (NULL: any), $7 the dispatcher's stride pass per
-- priority rank and $8 the priority weights, $9 a seed that rotates ties.
--   heads: every (queue, priority, tenant) with ready runs, and every limited
--     (queue, priority, tenant, job), found by skip scans: one index probe each,
--     whatever the backlog behind it.
--   sources: how many runs each head offers (for a limited job, up to its free slots:
--     a job at its limit offers nothing and its backlog is never walked).
--   priority_shares: priorities share the batch by stride scheduling on the weights
--     (70/25/5 by default); a priority with nothing ready takes no slot
--     (work-conserving).
--   turns, ranked: within a priority, tenants take turns (round-robin), a tenant's
--     heads oldest first; a tenant starts as many turns behind as it already holds
--     leased runs on the shard, so a tenant whose slow jobs hog the workers yields.
--   picked: the chosen count per head, oldest ready first, SKIP LOCKED.
-- Concurrent claimers can both see a job's last free slot: leases.claim settles that
-- after commit, under a lock per job (see over_limit).
WITH RECURSIVE heads AS (
    (SELECT q.queue, h.priority, h.tenant, h.ready_at, h.id
     FROM unnest($1::text[]) AS q(queue)
     CROSS JOIN LATERAL (
         SELECT r.priority, r.tenant, r.ready_at, r.id
         FROM live_runs AS r
         WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = q.queue
           AND ($6::text IS NULL OR r.tenant = $6)
         ORDER BY r.priority, r.tenant
         LIMIT 1) AS h)
    UNION ALL
    SELECT heads.queue, n.priority, n.tenant, n.ready_at, n.id
    FROM heads
    CROSS JOIN LATERAL (
        SELECT r.priority, r.tenant, r.ready_at, r.id
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = heads.queue
          AND ($6::text IS NULL OR r.tenant = $6)
          AND (r.priority, r.tenant) > (heads.priority, heads.tenant)
        ORDER BY r.priority, r.tenant
        LIMIT 1) AS n
), limited_heads AS (
    (SELECT q.queue, h.priority, h.tenant, h.job, h.concurrency, h.ready_at, h.id
     FROM unnest($1::text[]) AS q(queue)
     CROSS JOIN LATERAL (
         SELECT r.priority, r.tenant, r.job, r.concurrency, r.ready_at, r.id
         FROM live_runs AS r
         WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = q.queue
           AND ($6::text IS NULL OR r.tenant = $6)
         ORDER BY r.priority, r.tenant, r.job
         LIMIT 1) AS h)
    UNION ALL
    SELECT limited_heads.queue, n.priority, n.tenant, n.job, n.concurrency, n.ready_at, n.id
    FROM limited_heads
    CROSS JOIN LATERAL (
        SELECT r.priority, r.tenant, r.job, r.concurrency, r.ready_at, r.id
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = limited_heads.queue
          AND ($6::text IS NULL OR r.tenant = $6)
          AND (r.priority, r.tenant, r.job)
              > (limited_heads.priority, limited_heads.tenant, limited_heads.job)
        ORDER BY r.priority, r.tenant, r.job
        LIMIT 1) AS n
), limited_free AS (
    SELECT h.*,
           h.concurrency - (SELECT count(*)
                            FROM live_runs AS l
                            WHERE l.state = 'leased' AND l.concurrency > 0
                              AND l.tenant = h.tenant AND l.job = h.job) AS free
    FROM limited_heads AS h
), sources AS (
    -- How many ready runs each head offers this claim (up to a batch; for a limited
    -- job, up to its free slots: a job at its limit offers nothing and its backlog is
    -- never walked). Counted on the index, no rows carried: the ORDER BY is the
    -- index's, which keeps the generic plan on it (without it the plan was a
    -- sequential scan, walking every dead row at the head of the table).
    SELECT h.queue, h.priority, h.tenant, NULL::text AS job, h.ready_at, h.id,
           (SELECT count(*)
            FROM (SELECT 1
                  FROM live_runs AS r
                  WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = h.queue
                    AND r.priority = h.priority AND r.tenant = h.tenant
                  ORDER BY r.ready_at, r.id
                  LIMIT $2) AS ready)::integer AS n
    FROM heads AS h
    UNION ALL
    SELECT h.queue, h.priority, h.tenant, h.job, h.ready_at, h.id,
           (SELECT count(*)
            FROM (SELECT 1
                  FROM live_runs AS r
                  WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = h.queue
                    AND r.priority = h.priority AND r.tenant = h.tenant AND r.job = h.job
                  ORDER BY r.ready_at, r.id
                  LIMIT least($2, greatest(h.free, 0))) AS ready)::integer
    FROM limited_free AS h
), priority_shares AS (
    -- Stride scheduling between the priorities that offer anything.
    SELECT priority, count(*)::integer AS slots
    FROM (SELECT o.priority
          FROM (SELECT priority, least(sum(n), $2)::integer AS offered
                FROM sources GROUP BY priority) AS o
          CROSS JOIN LATERAL generate_series(1, o.offered) AS k
          ORDER BY ($7::double precision[])[o.priority + 1]
                   + k / ($8::double precision[])[o.priority + 1],
                   o.priority
          LIMIT $2) AS won
    GROUP BY priority
), contenders AS (
    SELECT DISTINCT s.priority, s.tenant
    FROM sources AS s
    JOIN priority_shares USING (priority)
    WHERE s.n > 0
), holding AS (
    -- Leased runs per tenant, counted only where tenants compete within a priority,
    -- and only up to four batches: past that, the tenant behind has every turn of this
    -- claim anyway, and the count stays cheap when a tenant holds thousands.
    SELECT c.tenant,
           (SELECT count(*)
            FROM (SELECT 1
                  FROM live_runs AS l
                  WHERE l.state = 'leased' AND l.tenant = c.tenant
                  -- The index's order (live_runs_leased), as in sources.
                  ORDER BY l.job, l.id DESC
                  LIMIT 4 * $2) AS held) AS leased
    FROM (SELECT DISTINCT tenant
          FROM contenders
          WHERE priority IN (SELECT priority FROM contenders
                             GROUP BY priority HAVING count(*) > 1)) AS c
), turns AS (
    -- A head needs no more slots than its priority won.
    SELECT s.queue, s.priority, s.tenant, s.job, s.ready_at, s.id, p.slots,
           coalesce(holding.leased, 0)
           + row_number() OVER (PARTITION BY s.priority, s.tenant
                                ORDER BY k, s.ready_at, s.id) AS turn
    FROM sources AS s
    JOIN priority_shares AS p USING (priority)
    CROSS JOIN LATERAL generate_series(1, least(s.n, p.slots)) AS k
    LEFT JOIN holding ON holding.tenant = s.tenant
), ranked AS (
    SELECT turns.*,
           row_number() OVER (PARTITION BY turns.priority
                              ORDER BY turns.turn,
                                       hashtextextended(turns.tenant, $9::bigint),
                                       turns.ready_at, turns.id) AS place
    FROM turns
), chosen AS (
    SELECT queue, priority, tenant, job, count(*)::integer AS take
    FROM ranked
    WHERE place <= slots
    GROUP BY queue, priority, tenant, job
), picked AS (
    SELECT p.id
    FROM chosen AS c
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = c.queue
          AND r.priority = c.priority AND r.tenant = c.tenant
        ORDER BY r.ready_at, r.id
        LIMIT c.take
        FOR UPDATE SKIP LOCKED) AS p
    WHERE c.job IS NULL
    UNION ALL
    SELECT p.id
    FROM chosen AS c
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = c.queue
          AND r.priority = c.priority AND r.tenant = c.tenant AND r.job = c.job
        ORDER BY r.ready_at, r.id
        LIMIT c.take
        FOR UPDATE SKIP LOCKED) AS p
    WHERE c.job IS NOT NULL
), clock AS (
    SELECT coalesce($4::timestamptz, now()) AS now
), leased AS (
    UPDATE live_runs AS r
    SET state = 'leased',
        attempt = r.attempt + 1,
        fencing_token = nextval('fencing_tokens'),
        lease_owner = $3,
        leased_at = clock.now,
        deadline = clock.now + make_interval(secs => r.timeout_seconds),
        lease_expires_at = least(
            clock.now + make_interval(secs => $5::double precision),
            clock.now + make_interval(secs => r.timeout_seconds)),
        updated_at = clock.now
    FROM clock
    -- = ANY(ARRAY(...)): primary-key probes, never a hash join over the whole table.
    WHERE r.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING r.id, r.tenant, r.job, r.queue, r.priority, r.attempt, r.max_attempts,
              r.idempotency_key, r.fencing_token, r.due_at, r.ready_at, r.leased_at,
              r.lease_expires_at, r.deadline, r.payload, r.concurrency, r.dry_run
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM leased
    ON CONFLICT DO NOTHING
)
-- Always one row at least (the leased columns NULL when nothing was leased): `heads` is
-- 1 when claim_one_head would have served this claim (one head, no limited job), more
-- otherwise.
SELECT leased.*, shape.heads
FROM (SELECT (SELECT count(*) FROM heads)::integer
             + CASE WHEN EXISTS (SELECT FROM limited_heads) THEN 2 ELSE 0 END AS heads)
     AS shape
LEFT JOIN leased ON true

-- name: claim_one_head
-- The claim when one head holds all the ready work ($1-$6 as in claim): one tenant of
-- one priority in the queues, no limited job. The batch is that head's oldest ready
-- runs, as the claim would choose, without its merging stages: it is that planning
-- and executor set-up of a dozen stages that made a claim of one run cost milliseconds.
-- Always one row at least: `heads` is 0 (nothing ready), 1 (this claim applied: the
-- other columns are NULL when it leased nothing) or 2 (several heads, or a limited job:
-- nothing was leased, the caller runs the claim).
WITH RECURSIVE heads AS (
    (SELECT q.queue, h.priority, h.tenant
     FROM unnest($1::text[]) AS q(queue)
     CROSS JOIN LATERAL (
         SELECT r.priority, r.tenant
         FROM live_runs AS r
         WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = q.queue
           AND ($6::text IS NULL OR r.tenant = $6)
         ORDER BY r.priority, r.tenant
         LIMIT 1) AS h)
    UNION ALL
    SELECT heads.queue, n.priority, n.tenant
    FROM heads
    CROSS JOIN LATERAL (
        SELECT r.priority, r.tenant
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = heads.queue
          AND ($6::text IS NULL OR r.tenant = $6)
          AND (r.priority, r.tenant) > (heads.priority, heads.tenant)
        ORDER BY r.priority, r.tenant
        LIMIT 1) AS n
), first_two AS (
    -- The recursion stops at the second head.
    SELECT * FROM heads LIMIT 2
), probe AS (
    SELECT CASE WHEN EXISTS (SELECT
                             FROM unnest($1::text[]) AS q(queue)
                             CROSS JOIN LATERAL (
                                 SELECT
                                 FROM live_runs AS r
                                 WHERE r.state = 'ready' AND r.concurrency > 0
                                   AND r.queue = q.queue
                                   AND ($6::text IS NULL OR r.tenant = $6)
                                 LIMIT 1) AS l)
                THEN 2
                ELSE (SELECT count(*) FROM first_two)::integer END AS heads
), picked AS (
    SELECT p.id
    FROM first_two AS h
    CROSS JOIN LATERAL (
        SELECT r.id
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = h.queue
          AND r.priority = h.priority AND r.tenant = h.tenant
        ORDER BY r.ready_at, r.id
        LIMIT $2
        FOR UPDATE SKIP LOCKED) AS p
    WHERE (SELECT heads FROM probe) = 1
), clock AS (
    SELECT coalesce($4::timestamptz, now()) AS now
), leased AS (
    UPDATE live_runs AS r
    SET state = 'leased',
        attempt = r.attempt + 1,
        fencing_token = nextval('fencing_tokens'),
        lease_owner = $3,
        leased_at = clock.now,
        deadline = clock.now + make_interval(secs => r.timeout_seconds),
        lease_expires_at = least(
            clock.now + make_interval(secs => $5::double precision),
            clock.now + make_interval(secs => r.timeout_seconds)),
        updated_at = clock.now
    FROM clock
    WHERE r.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING r.id, r.tenant, r.job, r.queue, r.priority, r.attempt, r.max_attempts,
              r.idempotency_key, r.fencing_token, r.due_at, r.ready_at, r.leased_at,
              r.lease_expires_at, r.deadline, r.payload, r.concurrency, r.dry_run
), marked AS (
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM leased
    ON CONFLICT DO NOTHING
)
SELECT leased.*, probe.heads
FROM probe
LEFT JOIN leased ON true

-- name: lock_jobs
-- Serialise the limit check of these jobs ($1: 'tenant/job' keys, sorted by the caller
-- so two claimers never wait on each other in a cycle).
SELECT pg_advisory_xact_lock(hashtextextended(key, 0)) FROM unnest($1::text[]) AS key

-- name: over_limit
-- Leased runs over each job's limit, counted in a statement that starts after the job
-- lock is held, so it sees every lease committed by an earlier holder.
SELECT j.tenant, j.job, count(r.id) - j.limit_ AS excess
FROM unnest($1::text[], $2::text[], $3::integer[]) AS j(tenant, job, limit_)
JOIN live_runs AS r ON r.tenant = j.tenant AND r.job = j.job AND r.state = 'leased'
                     AND r.concurrency > 0
GROUP BY j.tenant, j.job, j.limit_
HAVING count(r.id) > j.limit_

-- name: heartbeat
-- Extend the leases of runs $1 held with tokens $2 (pairwise, $2[i] for $1[i]) by $3
-- seconds, never past the attempt's deadline nor more than 6 hours at once. The id list
-- drives the primary-key lookup; array_position pairs each row with its own token, so
-- swapped tokens match nothing (joining unnest() here made the planner hash-join).
-- $5/$6 scope the caller to a tenant and queues (NULL: unrestricted). A run whose cancel
-- was requested is answered but not extended: it finishes the lease it holds, so a run
-- that overlapPolicy Replace (or anyone) stopped is fenced off within one lease.
WITH clock AS (SELECT coalesce($4::timestamptz, now()) AS now)
UPDATE live_runs AS r
SET lease_expires_at = CASE WHEN r.cancel_requested THEN r.lease_expires_at
                            ELSE least(
                                clock.now + make_interval(secs => $3::double precision),
                                r.deadline,
                                clock.now + interval '6 hours') END,
    updated_at = clock.now
FROM clock
WHERE r.id = ANY($1::bigint[])
  AND r.fencing_token = ($2::bigint[])[array_position($1::bigint[], r.id)]
  AND r.state = 'leased'
  AND ($5::text IS NULL OR r.tenant = $5)
  AND ($6::text[] IS NULL OR r.queue = ANY($6::text[]))
RETURNING r.id, r.fencing_token, r.lease_expires_at, r.cancel_requested

-- name: complete_succeeded
-- The hot path: every succeeded run of the batch in one statement, which moves the
-- runs from live_runs to the history. A succeeded run's finished row is the record of
-- its last attempt (see the run_attempts view); a run whose cancel was requested while
-- leased ends `cancelled` and records its attempt.
WITH clock AS (
    SELECT coalesce($3::timestamptz, now()) AS now
), done AS (
    DELETE FROM live_runs AS r
    WHERE r.id = ANY($1::bigint[])
      AND r.fencing_token = ($2::bigint[])[array_position($1::bigint[], r.id)]
      AND r.state = 'leased'
      AND ($4::text IS NULL OR r.tenant = $4)
      AND ($5::text[] IS NULL OR r.queue = ANY($5::text[]))
    RETURNING r.*
), moved AS (
    INSERT INTO finished_runs
    SELECT id, tenant, job, queue, priority,
           CASE WHEN cancel_requested THEN 'cancelled' ELSE 'succeeded' END, origin,
           attempt, max_attempts, retry_base, retry_max, timeout_seconds, due_at, ready_at,
           start_deadline, idempotency_key, payload, fencing_token, lease_owner, leased_at,
           NULL, deadline, cancel_requested, last_error, created_at, clock.now, clock.now,
           concurrency, request_fingerprint
    FROM done, clock
    RETURNING id, fencing_token, state
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM done
    ON CONFLICT DO NOTHING
), recorded AS (
    INSERT INTO attempts (run_id, attempt, fencing_token, worker_id, leased_at,
                          finished_at, outcome, result_state)
    SELECT id, attempt, fencing_token, lease_owner, leased_at, clock.now, 'cancelled',
           'cancelled'
    FROM done, clock
    WHERE cancel_requested
)
SELECT id AS run_id, fencing_token, state AS result_state,
       NULL::timestamptz AS next_attempt_at
FROM moved

-- name: lock_leased
-- The failure path locks its rows first: the retry delay is drawn in Python.
SELECT id, attempt, max_attempts, retry_base, retry_max, fencing_token, cancel_requested
FROM live_runs
WHERE id = ANY($1::bigint[])
  AND fencing_token = ($2::bigint[])[array_position($1::bigint[], id)]
  AND state = 'leased'
  AND ($3::text IS NULL OR tenant = $3)
  AND ($4::text[] IS NULL OR queue = ANY($4::text[]))
FOR UPDATE

-- name: record_failures
-- Apply the outcomes decided for locked leased runs: $2 the new state (retry_wait, dead
-- or cancelled), $3 the retry delay in seconds, $4 the error, $5 the attempt outcome.
-- Retried runs stay live; dead and cancelled ones move to the history.
WITH clock AS (
    SELECT coalesce($6::timestamptz, now()) AS now
), decided AS (
    SELECT *
    FROM unnest($1::bigint[], $2::text[], $3::double precision[], $4::jsonb[], $5::text[])
         AS d(id, state, delay, error, outcome)
), retried AS (
    UPDATE live_runs AS r
    SET state = 'retry_wait',
        ready_at = clock.now + make_interval(secs => d.delay),
        finished_at = NULL,
        last_error = d.error,
        lease_expires_at = NULL,
        updated_at = clock.now
    FROM decided AS d, clock
    WHERE r.id = d.id AND d.state = 'retry_wait'
    RETURNING r.id, r.tenant, r.job, r.attempt, r.fencing_token, r.lease_owner,
              r.leased_at, r.state, r.ready_at, d.outcome, d.error
), ended AS (
    DELETE FROM live_runs AS r
    USING decided AS d
    WHERE r.id = d.id AND d.state <> 'retry_wait'
    RETURNING r.*, d.state AS new_state, d.error AS new_error, d.outcome
), moved AS (
    INSERT INTO finished_runs
    SELECT id, tenant, job, queue, priority, new_state, origin, attempt, max_attempts,
           retry_base, retry_max, timeout_seconds, due_at, ready_at, start_deadline,
           idempotency_key, payload, fencing_token, lease_owner, leased_at, NULL, deadline,
           cancel_requested, new_error, created_at, clock.now, clock.now, concurrency,
           request_fingerprint
    FROM ended, clock
), changed AS (
    SELECT id, tenant, job, attempt, fencing_token, lease_owner, leased_at, state,
           ready_at, outcome, error
    FROM retried
    UNION ALL
    SELECT id, tenant, job, attempt, fencing_token, lease_owner, leased_at, new_state,
           ready_at, outcome, new_error
    FROM ended
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM changed
    ON CONFLICT DO NOTHING
)
INSERT INTO attempts (run_id, attempt, fencing_token, worker_id, leased_at, finished_at,
                      outcome, result_state, next_attempt_at, error)
SELECT id, attempt, fencing_token, lease_owner, leased_at, clock.now, outcome, state,
       CASE WHEN state = 'retry_wait' THEN ready_at END, error
FROM changed, clock
RETURNING run_id, fencing_token, result_state, next_attempt_at

-- name: completion_of
-- What an earlier completion with this token answered (for idempotent repeats).
SELECT result_state, next_attempt_at
FROM run_attempts
WHERE run_id = $1 AND fencing_token = $2 AND outcome <> 'lease-expired'

-- name: notify_ready
-- Wake long-polling lease requests; delivered only when the transaction commits. The
-- payload names the shard's schema: shards sharing a database share the channel, and
-- each shard's listener keeps its own (a queue name has no space).
SELECT pg_notify('tickwork_ready', current_schema() || ' ' || queue)
FROM (SELECT DISTINCT unnest($1::text[]) AS queue) AS queues

-- name: release
-- Give back leases nobody received (the long-poll's client went away): the runs are
-- ready again and the attempt is not counted. Their next lease draws a new token.
WITH released AS (
    UPDATE live_runs
    SET state = 'ready',
        attempt = attempt - 1,
        lease_owner = NULL,
        leased_at = NULL,
        lease_expires_at = NULL,
        deadline = NULL,
        updated_at = coalesce($3::timestamptz, now())
    WHERE id = ANY($1::bigint[])
      AND fencing_token = ($2::bigint[])[array_position($1::bigint[], id)]
      AND state = 'leased'
    RETURNING tenant, job, queue
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM released
    ON CONFLICT DO NOTHING
)
SELECT queue FROM released

-- name: generic_plan
-- The claim's plan is the same for every argument, and groups by sorting: see
-- leases.claim and database.claim_settings.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_hashagg', 'off', true)

-- name: run_state
SELECT state, tenant, queue FROM runs WHERE id = $1

-- name: run_queues
-- The queues of runs $1 in tenant $2, live or finished: what a Kubernetes caller's
-- RBAC is asked about before its heartbeats or completions act (a repeated completion
-- of a finished run answers as the first did, so finished runs count too).
SELECT DISTINCT queue FROM runs WHERE id = ANY($1::bigint[]) AND tenant = $2
