-- The worker path: claim, heartbeat, complete, release (the sweeps are in sweeps.sql).
-- $now parameters are NULL in production (database clock) and pinned in tests.

-- name: claim
-- The merging claim of the plain path: runs without flow control (concurrency 0) in
-- one statement. $1 queues, $2 batch, $3 worker, $4 now, $5 lease seconds, $6 tenant
-- (NULL: any), $7 the dispatcher's stride pass per priority rank and $8 the priority
-- weights, $9 a seed that rotates ties. The stages are claim_limited's (below), without
-- its limited heads: while runs with flow control are ready the caller claims through
-- claim_limited, which serves both.
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
), sources AS (
    -- How many ready runs each head offers this claim (up to a batch). Counted on the
    -- index, no rows carried: the ORDER BY is the index's, which keeps the generic plan on it (without it the plan was a
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
    -- A paused queue of the tenant offers nothing (queue_pauses: one probe a head).
    WHERE NOT EXISTS (SELECT FROM queue_pauses AS p
                      WHERE p.tenant = h.tenant AND p.queue = h.queue)
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
    WHERE c.job IS NULL AND NOT (SELECT limited FROM probe)
), probe AS (
    -- Ready runs with flow control in the queues: this claim leases nothing then, and
    -- the caller claims through lock_flow and claim_limited, which merges both paths.
    SELECT EXISTS (SELECT
                   FROM unnest($1::text[]) AS q(queue)
                   CROSS JOIN LATERAL (
                       SELECT
                       FROM live_runs AS r
                       WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = q.queue
                         AND ($6::text IS NULL OR r.tenant = $6)
                       LIMIT 1) AS l) AS limited
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
-- 1 when claim_one_head would have served this claim (one head), more otherwise;
-- `limited` whether ready runs with flow control wait in the queues (then `heads` counts
-- 2 more).
SELECT leased.*, shape.heads, shape.limited
FROM (SELECT (SELECT count(*) FROM heads)::integer + CASE WHEN limited THEN 2 ELSE 0 END
                 AS heads,
             limited
      FROM probe) AS shape
LEFT JOIN leased ON true

-- name: claim_limited
-- The claim while runs with flow control are ready, after lock_flow in the same
-- transaction: the plain path's heads and the limited ones, merged. $1 queues, $2 batch, $3 worker, $4 now, $5 lease seconds,
-- $6 tenant (NULL: any), $7 the dispatcher's stride pass per priority rank and $8 the
-- priority weights, $9 a seed that rotates ties, $10 the flow buckets lock_flow locked
-- in this transaction (NULL: no run with flow control is claimed).
--   heads: every (queue, priority, tenant) with ready runs of the plain path, found by
--     skip scans: one index probe each, whatever the backlog behind it.
--   limited_heads: the same for runs with flow control (concurrency > 0), one head per
--     (queue, priority, tenant, job, concurrency key, rate key), among the locked
--     buckets only.
--   limited_offers, limited_sources: how many runs each limited head may take: no more
--     than its concurrency bucket has free slots (the smallest `concurrency` of the
--     bucket's heads, less its leased runs) nor its rate bucket has left in the sliding
--     window (rate_windows), shared oldest first between the heads of one bucket. A
--     head at its limit offers nothing and its backlog is never walked.
--   sources: how many runs each head offers (up to a batch).
--   priority_shares: priorities share the batch by stride scheduling on the weights
--     (70/25/5 by default); a priority with nothing ready takes no slot
--     (work-conserving).
--   turns, ranked: within a priority, tenants take turns (round-robin), a tenant's
--     heads oldest first; a tenant starts as many turns behind as it already holds
--     leased runs on the shard, so a tenant whose slow jobs hog the workers yields.
--   picked: the chosen count per head, oldest ready first, SKIP LOCKED.
--   windowed: the leases counted in their rate buckets' current slot; slots past the
--     period are dropped.
-- The buckets were locked before this statement began, so its snapshot holds every
-- lease and window count committed by an earlier holder: the limits are exact however
-- many claimers race.
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
    (SELECT q.queue, h.*
     FROM unnest($1::text[]) AS q(queue)
     CROSS JOIN LATERAL (
         SELECT r.priority, r.tenant, r.job, coalesce(r.concurrency_key, '') AS ckey,
                coalesce(r.rate_key, '') AS rkey, r.concurrency, r.concurrency_key,
                r.rate_key, r.rate_limit, r.rate_period, r.ready_at, r.id
         FROM live_runs AS r
         WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = q.queue
           AND ($6::text IS NULL OR r.tenant = $6)
         ORDER BY r.priority, r.tenant, r.job, coalesce(r.concurrency_key, ''),
                  coalesce(r.rate_key, '')
         LIMIT 1) AS h
     WHERE $10::text[] IS NOT NULL)
    UNION ALL
    SELECT limited_heads.queue, n.*
    FROM limited_heads
    CROSS JOIN LATERAL (
        SELECT r.priority, r.tenant, r.job, coalesce(r.concurrency_key, '') AS ckey,
               coalesce(r.rate_key, '') AS rkey, r.concurrency, r.concurrency_key,
               r.rate_key, r.rate_limit, r.rate_period, r.ready_at, r.id
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = limited_heads.queue
          AND ($6::text IS NULL OR r.tenant = $6)
          AND (r.priority, r.tenant, r.job, coalesce(r.concurrency_key, ''),
               coalesce(r.rate_key, ''))
              > (limited_heads.priority, limited_heads.tenant, limited_heads.job,
                 limited_heads.ckey, limited_heads.rkey)
        ORDER BY r.priority, r.tenant, r.job, coalesce(r.concurrency_key, ''),
                 coalesce(r.rate_key, '')
        LIMIT 1) AS n
), limited_buckets AS (
    -- The buckets (as lock_flow names them) of each head: those lock_flow did not
    -- lock (a key that appeared since) wait for the next claim.
    SELECT h.*,
           h.tenant || chr(30) || coalesce(h.concurrency_key, 'job/' || h.job) AS cbucket,
           h.tenant || chr(30) || h.rate_key AS rbucket
    FROM limited_heads AS h
    WHERE NOT EXISTS (SELECT FROM queue_pauses AS p
                      WHERE p.tenant = h.tenant AND p.queue = h.queue)
), limited_offers AS (
    SELECT h.*,
           min(h.concurrency) OVER (PARTITION BY h.cbucket)
           - CASE WHEN h.concurrency = 2147483647 THEN 0
                  WHEN h.concurrency_key IS NULL
                      THEN (SELECT count(*)
                            FROM live_runs AS l
                            WHERE l.state = 'leased' AND l.concurrency > 0
                              AND l.tenant = h.tenant AND l.job = h.job
                              AND l.concurrency_key IS NULL)
                  ELSE (SELECT count(*)
                        FROM live_runs AS l
                        WHERE l.state = 'leased' AND l.concurrency_key IS NOT NULL
                          AND l.tenant = h.tenant
                          AND l.concurrency_key = h.concurrency_key) END AS free,
           CASE WHEN h.rate_key IS NULL THEN $2
                ELSE h.rate_limit
                     - coalesce((SELECT sum(w.leased)
                                 FROM rate_windows AS w
                                 WHERE w.tenant = h.tenant AND w.key = h.rate_key
                                   AND w.slot > coalesce($4::timestamptz, now())
                                                - make_interval(secs => h.rate_period)),
                                0)::integer END AS rate_left
    FROM limited_buckets AS h
    WHERE h.cbucket = ANY($10::text[])
      AND (h.rate_key IS NULL OR h.rbucket = ANY($10::text[]))
), limited_slots AS (
    -- Each head's runs that its own limits allow, ranked oldest first in each of its
    -- buckets: a bucket shared by several heads (a key's runs of a group's jobs, a rate
    -- key's runs of several concurrency keys) is not given out twice.
    SELECT o.queue, o.priority, o.tenant, o.job, o.ckey, o.rkey, o.ready_at, o.id,
           o.free, o.rate_left, o.rate_key,
           row_number() OVER (PARTITION BY o.cbucket ORDER BY k, o.ready_at, o.id) AS c_rank,
           row_number() OVER (PARTITION BY o.rbucket ORDER BY k, o.ready_at, o.id) AS r_rank
    FROM limited_offers AS o
    CROSS JOIN LATERAL generate_series(
        1,
        (SELECT count(*)
         FROM (SELECT 1
               FROM live_runs AS r
               WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = o.queue
                 AND r.priority = o.priority AND r.tenant = o.tenant AND r.job = o.job
                 AND coalesce(r.concurrency_key, '') = o.ckey
                 AND coalesce(r.rate_key, '') = o.rkey
               ORDER BY r.ready_at, r.id
               LIMIT least($2, greatest(o.free, 0), greatest(o.rate_left, 0))) AS ready)::integer
    ) AS k
), sources AS (
    -- How many ready runs each head offers this claim (up to a batch). Counted on the
    -- index, no rows carried: the ORDER BY is the index's, which keeps the generic plan
    -- on it (without it the plan was a sequential scan, walking every dead row at the
    -- head of the table).
    SELECT h.queue, h.priority, h.tenant, NULL::text AS job, NULL::text AS ckey,
           NULL::text AS rkey, h.ready_at, h.id,
           (SELECT count(*)
            FROM (SELECT 1
                  FROM live_runs AS r
                  WHERE r.state = 'ready' AND r.concurrency = 0 AND r.queue = h.queue
                    AND r.priority = h.priority AND r.tenant = h.tenant
                  ORDER BY r.ready_at, r.id
                  LIMIT $2) AS ready)::integer AS n
    FROM heads AS h
    -- A paused queue of the tenant offers nothing (queue_pauses: one probe a head).
    WHERE NOT EXISTS (SELECT FROM queue_pauses AS p
                      WHERE p.tenant = h.tenant AND p.queue = h.queue)
    UNION ALL
    SELECT s.queue, s.priority, s.tenant, s.job, s.ckey, s.rkey, min(s.ready_at),
           min(s.id),
           count(*) FILTER (WHERE s.c_rank <= s.free
                              AND (s.rate_key IS NULL OR s.r_rank <= s.rate_left))::integer
    FROM limited_slots AS s
    GROUP BY s.queue, s.priority, s.tenant, s.job, s.ckey, s.rkey
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
    SELECT s.queue, s.priority, s.tenant, s.job, s.ckey, s.rkey, s.ready_at, s.id,
           p.slots,
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
    SELECT queue, priority, tenant, job, ckey, rkey, count(*)::integer AS take
    FROM ranked
    WHERE place <= slots
    GROUP BY queue, priority, tenant, job, ckey, rkey
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
          AND coalesce(r.concurrency_key, '') = c.ckey
          AND coalesce(r.rate_key, '') = c.rkey
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
              r.lease_expires_at, r.deadline, r.payload, r.concurrency, r.dry_run,
              r.rate_key, r.rate_period
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM leased
    ON CONFLICT DO NOTHING
), windows AS (
    -- Each rate bucket's leases of this claim and the end of the slot (1/64 of the
    -- period) they fall in: a lease counts until its slot's end plus the period, at
    -- most 1/64 of a period longer than an exact sliding window would count it.
    SELECT l.tenant, l.rate_key, max(l.rate_period) AS period, count(*)::integer AS n,
           to_timestamp(ceil(extract(epoch FROM clock.now)::double precision
                             / (max(l.rate_period) / 64))
                        * (max(l.rate_period) / 64)) AS slot
    FROM leased AS l, clock
    WHERE l.rate_key IS NOT NULL
    GROUP BY l.tenant, l.rate_key, clock.now
), windowed AS (
    INSERT INTO rate_windows (tenant, key, slot, leased)
    SELECT tenant, rate_key, slot, n FROM windows
    ORDER BY tenant, rate_key
    ON CONFLICT (tenant, key, slot) DO UPDATE SET leased = rate_windows.leased + excluded.leased
), expired AS (
    -- Kept a period longer than the window needs: a claim whose now is older than one
    -- already made (another dispatcher's clock, a reading taken before a lock) still
    -- counts the slots its own window holds.
    DELETE FROM rate_windows AS w
    USING windows, clock
    WHERE w.tenant = windows.tenant AND w.key = windows.rate_key
      AND w.slot <= clock.now - make_interval(secs => 2 * windows.period)
)
-- Always one row at least (the leased columns NULL when nothing was leased): `heads` is
-- 1 when claim_one_head would have served this claim (one head, no limited run), more
-- otherwise; `limited` whether ready runs with flow control wait in the queues (the
-- caller claims through lock_flow then).
SELECT leased.id, leased.tenant, leased.job, leased.queue, leased.priority,
       leased.attempt, leased.max_attempts, leased.idempotency_key, leased.fencing_token,
       leased.due_at, leased.ready_at, leased.leased_at, leased.lease_expires_at,
       leased.deadline, leased.payload, leased.concurrency, leased.dry_run, shape.heads,
       shape.limited
FROM (SELECT (SELECT count(*) FROM heads)::integer + CASE WHEN limited THEN 2 ELSE 0 END
                 AS heads,
             limited
      FROM (SELECT EXISTS (SELECT
                           FROM unnest($1::text[]) AS q(queue)
                           CROSS JOIN LATERAL (
                               SELECT
                               FROM live_runs AS r
                               WHERE r.state = 'ready' AND r.concurrency > 0
                                 AND r.queue = q.queue
                                 AND ($6::text IS NULL OR r.tenant = $6)
                               LIMIT 1) AS l) AS limited) AS probe) AS shape
LEFT JOIN leased ON true

-- name: claim_one_head
-- The claim when one head holds all the ready work ($1-$6 as in claim): one tenant of
-- one priority in the queues, no limited job. The batch is that head's oldest ready
-- runs, as the claim would choose, without its merging stages: it is that planning
-- and executor set-up of a dozen stages that made a claim of one run cost milliseconds.
-- Always one row at least: `heads` is 0 (nothing ready), 1 (this claim applied: the
-- other columns are NULL when it leased nothing), 2 (several heads: nothing was leased,
-- the caller runs the claim) or 3 (runs with flow control are ready: nothing was
-- leased, the caller claims through lock_flow).
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
    -- The recursion stops at the second head a paused queue does not hold.
    SELECT *
    FROM heads AS h
    WHERE NOT EXISTS (SELECT FROM queue_pauses AS p
                      WHERE p.tenant = h.tenant AND p.queue = h.queue)
    LIMIT 2
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
                THEN 3
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

-- name: lock_flow
-- The first statement of a claim that may lease runs with flow control ($1 queues, $2
-- tenant: NULL any): the buckets of the limited heads ready in the queues (a
-- concurrency bucket `tenant chr(30) concurrency key`, or `... job/<job>` for a job's
-- own limit, and a rate bucket `tenant chr(30) rate key`), locked for the transaction
-- in one order (hash, then name), so two claimers never wait on each other in a cycle.
-- The claim that follows in the transaction takes a new snapshot, which holds every
-- lease committed by an earlier holder. Answered: the buckets locked, and the heads
-- whose key has a strategy other than Wait (for flow_strategies).
WITH RECURSIVE limited_heads AS (
    (SELECT q.queue, h.*
     FROM unnest($1::text[]) AS q(queue)
     CROSS JOIN LATERAL (
         SELECT r.priority, r.tenant, r.job, coalesce(r.concurrency_key, '') AS ckey,
                coalesce(r.rate_key, '') AS rkey, r.concurrency, r.concurrency_key,
                r.concurrency_strategy, r.rate_key
         FROM live_runs AS r
         WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = q.queue
           AND ($2::text IS NULL OR r.tenant = $2)
         ORDER BY r.priority, r.tenant, r.job, coalesce(r.concurrency_key, ''),
                  coalesce(r.rate_key, '')
         LIMIT 1) AS h)
    UNION ALL
    SELECT limited_heads.queue, n.*
    FROM limited_heads
    CROSS JOIN LATERAL (
        SELECT r.priority, r.tenant, r.job, coalesce(r.concurrency_key, '') AS ckey,
               coalesce(r.rate_key, '') AS rkey, r.concurrency, r.concurrency_key,
               r.concurrency_strategy, r.rate_key
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = limited_heads.queue
          AND ($2::text IS NULL OR r.tenant = $2)
          AND (r.priority, r.tenant, r.job, coalesce(r.concurrency_key, ''),
               coalesce(r.rate_key, ''))
              > (limited_heads.priority, limited_heads.tenant, limited_heads.job,
                 limited_heads.ckey, limited_heads.rkey)
        ORDER BY r.priority, r.tenant, r.job, coalesce(r.concurrency_key, ''),
                 coalesce(r.rate_key, '')
        LIMIT 1) AS n
), served AS (
    -- A paused queue's runs are left as they are: no bucket locked, no strategy.
    SELECT h.*
    FROM limited_heads AS h
    WHERE NOT EXISTS (SELECT FROM queue_pauses AS p
                      WHERE p.tenant = h.tenant AND p.queue = h.queue)
), buckets AS (
    SELECT DISTINCT b.name
    FROM served AS h
    CROSS JOIN LATERAL (
        VALUES (h.tenant || chr(30) || coalesce(h.concurrency_key, 'job/' || h.job)),
               (h.tenant || chr(30) || h.rate_key)) AS b(name)
    WHERE b.name IS NOT NULL
), locked AS (
    -- OFFSET 0 keeps the sort below the calls: the locks are taken in its order.
    SELECT sorted.name, pg_advisory_xact_lock(hashtextextended(sorted.name, 0))
    FROM (SELECT name FROM buckets ORDER BY hashtextextended(name, 0), name OFFSET 0)
         AS sorted
), strategic AS (
    SELECT DISTINCT queue, priority, tenant, job, concurrency_key, concurrency,
           concurrency_strategy
    FROM served
    WHERE concurrency_key IS NOT NULL AND concurrency_strategy IN ('CancelNewest', 'CancelRunning')
)
SELECT (SELECT array_agg(name) FROM locked) AS buckets,
       (SELECT array_agg(queue) FROM strategic) AS queues,
       (SELECT array_agg(priority) FROM strategic) AS priorities,
       (SELECT array_agg(tenant) FROM strategic) AS tenants,
       (SELECT array_agg(job) FROM strategic) AS jobs,
       (SELECT array_agg(concurrency_key) FROM strategic) AS keys,
       (SELECT array_agg(concurrency) FROM strategic) AS limits,
       (SELECT array_agg(concurrency_strategy) FROM strategic) AS strategies

-- name: flow_strategies
-- Between lock_flow and the claim, under the same locks: the strategies of keys at
-- their limit. $1-$7 the heads lock_flow answered (pairwise: queue, priority, tenant,
-- job, concurrency key, limit, strategy), $8 now. CancelNewest: the ready runs of a key
-- past its free slots, newest, end `cancelled`. CancelRunning: the newest ready runs of
-- a key (up to its limit) are kept and the older ready ones end `cancelled`; as many of
-- its leased runs as the kept ones need slots, oldest first, are asked to stop
-- (cancelRequested, their lease no longer extended, as overlapPolicy Replace does): the
-- kept runs are leased once those have ended, so the limit holds throughout.
WITH clock AS (
    SELECT coalesce($8::timestamptz, now()) AS now
), heads AS (
    SELECT DISTINCT *
    FROM unnest($1::text[], $2::smallint[], $3::text[], $4::text[], $5::text[],
                $6::integer[], $7::text[])
         AS h(queue, priority, tenant, job, concurrency_key, concurrency, strategy)
), buckets AS (
    SELECT b.tenant, b.concurrency_key, b.n, b.strategy,
           (SELECT count(*)
            FROM live_runs AS l
            WHERE l.state = 'leased' AND l.concurrency_key IS NOT NULL
              AND l.tenant = b.tenant AND l.concurrency_key = b.concurrency_key)::integer
               AS leased
    FROM (SELECT tenant, concurrency_key, min(concurrency) AS n, min(strategy) AS strategy
          FROM heads GROUP BY tenant, concurrency_key) AS b
), ready AS (
    SELECT r.id, h.tenant, h.concurrency_key,
           row_number() OVER (PARTITION BY h.tenant, h.concurrency_key
                              ORDER BY r.ready_at, r.id) AS oldest_first,
           row_number() OVER (PARTITION BY h.tenant, h.concurrency_key
                              ORDER BY r.ready_at DESC, r.id DESC) AS newest_first
    FROM heads AS h
    CROSS JOIN LATERAL (
        SELECT r.id, r.ready_at
        FROM live_runs AS r
        WHERE r.state = 'ready' AND r.concurrency > 0 AND r.queue = h.queue
          AND r.priority = h.priority AND r.tenant = h.tenant AND r.job = h.job
          AND coalesce(r.concurrency_key, '') = h.concurrency_key
        ORDER BY r.ready_at, r.id
        LIMIT 10000) AS r
), doomed AS (
    SELECT ready.id
    FROM ready
    JOIN buckets USING (tenant, concurrency_key)
    WHERE (buckets.strategy = 'CancelNewest'
           AND ready.oldest_first > greatest(buckets.n - buckets.leased, 0))
       OR (buckets.strategy = 'CancelRunning' AND ready.newest_first > buckets.n)
), ended AS (
    DELETE FROM live_runs AS r
    WHERE r.id = ANY(ARRAY(SELECT id FROM doomed)) AND r.state = 'ready'
    RETURNING r.*
), moved AS (
    INSERT INTO finished_runs (id, tenant, job, queue, priority, state, origin, attempt,
                               max_attempts, retry_base, retry_max, timeout_seconds,
                               due_at, ready_at, start_deadline, idempotency_key,
                               payload, cancel_requested, last_error, created_at,
                               updated_at, finished_at, concurrency, request_fingerprint)
    SELECT e.id, e.tenant, e.job, e.queue, e.priority, 'cancelled', e.origin, e.attempt,
           e.max_attempts, e.retry_base, e.retry_max, e.timeout_seconds, e.due_at,
           e.ready_at, e.start_deadline, e.idempotency_key, e.payload, false,
           jsonb_build_object('reason', e.concurrency_strategy, 'message',
                              'cancelled by concurrencyKey.strategy '
                              || e.concurrency_strategy || ': its key was at its limit'),
           e.created_at, clock.now, clock.now, e.concurrency, e.request_fingerprint
    FROM ended AS e, clock
), stopping AS (
    -- CancelRunning: the oldest leased runs, as many as the kept ready runs lack slots.
    SELECT s.id
    FROM buckets AS b
    CROSS JOIN LATERAL (
        SELECT l.id
        FROM live_runs AS l
        WHERE l.state = 'leased' AND l.concurrency_key IS NOT NULL
          AND l.tenant = b.tenant AND l.concurrency_key = b.concurrency_key
          AND NOT l.cancel_requested
        ORDER BY l.leased_at, l.id
        LIMIT greatest(
            least(b.n, (SELECT count(*) FROM ready
                        WHERE ready.tenant = b.tenant
                          AND ready.concurrency_key = b.concurrency_key))
            - (b.n - b.leased)
            - (SELECT count(*) FROM live_runs AS c
               WHERE c.state = 'leased' AND c.concurrency_key IS NOT NULL
                 AND c.tenant = b.tenant AND c.concurrency_key = b.concurrency_key
                 AND c.cancel_requested),
            0)) AS s
    WHERE b.strategy = 'CancelRunning'
), stopped AS (
    UPDATE live_runs AS r
    SET cancel_requested = true, updated_at = clock.now
    FROM clock
    WHERE r.id = ANY(ARRAY(SELECT id FROM stopping)) AND r.state = 'leased'
    RETURNING r.tenant, r.job
), marked AS (
    INSERT INTO changed_jobs (tenant, job)
    SELECT tenant, job FROM ended
    UNION
    SELECT tenant, job FROM stopped
    ON CONFLICT DO NOTHING
)
SELECT (SELECT count(*) FROM ended)::integer AS cancelled,
       (SELECT count(*) FROM stopped)::integer AS stopping

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
), reset AS (
    -- A succeeded run ends its job's streak of dead runs (spec.pauseAfterFailures).
    -- Only a job with a streak is written (rare); its row is locked in (tenant, name)
    -- order, as record_failures locks it, so the two never wait on each other in a cycle.
    UPDATE definitions AS d
    SET consecutive_dead = 0
    FROM (SELECT k.tenant, k.name
          FROM definitions AS k
          WHERE (k.tenant, k.name) IN (SELECT tenant, job FROM done WHERE NOT cancel_requested)
            AND k.consecutive_dead > 0
          ORDER BY k.tenant, k.name
          FOR UPDATE OF k) AS streak
    WHERE d.tenant = streak.tenant AND d.name = streak.name
)
SELECT id AS run_id, fencing_token, state AS result_state,
       NULL::timestamptz AS next_attempt_at
FROM moved

-- name: lock_leased
-- The failure and snooze path locks its rows first: the retry delay is drawn in Python,
-- and a snooze past the limit (or of a run asked to stop) is decided there as a failure.
SELECT id, attempt, max_attempts, retry_base, retry_max, fencing_token, cancel_requested,
       snoozes
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
), dead AS (
    -- spec.pauseAfterFailures: each job's runs that went dead here, and the newest.
    SELECT tenant, job, count(*)::integer AS runs,
           (array_agg(id ORDER BY id DESC))[1] AS last_id,
           (array_agg(new_error ORDER BY id DESC))[1] AS last_error
    FROM ended
    WHERE new_state = 'dead'
    GROUP BY tenant, job
), streak AS (
    -- The caller locked these definitions (lock_definitions_of_runs) before this
    -- statement began, so its snapshot holds their latest counts: the sums are exact
    -- however many dead runs of a job complete at once, and only the transaction whose
    -- runs reach the limit of a running job pauses it.
    SELECT d.tenant, d.name, d.consecutive_dead + dead.runs AS consecutive_dead,
           dead.last_id, dead.last_error,
           (d.spec ->> 'pauseAfterFailures')::integer AS pause_after,
           (NOT d.paused AND d.consecutive_dead + dead.runs
                             >= (d.spec ->> 'pauseAfterFailures')::integer)
               IS TRUE AS pausing
    FROM definitions AS d
    JOIN dead ON d.tenant = dead.tenant AND d.name = dead.job
), counted AS (
    UPDATE definitions AS d
    SET consecutive_dead = s.consecutive_dead,
        paused = d.paused OR s.pausing,
        paused_reason = CASE WHEN s.pausing
                             THEN jsonb_build_object('consecutiveDead', s.consecutive_dead,
                                                     'runId', s.last_id,
                                                     'error', s.last_error,
                                                     'at', clock.now)
                             ELSE d.paused_reason END,
        generation = d.generation + CASE WHEN s.pausing THEN 1 ELSE 0 END,
        updated_at = CASE WHEN s.pausing THEN clock.now ELSE d.updated_at END
    FROM streak AS s, clock
    WHERE d.tenant = s.tenant AND d.name = s.name
), paused_audit AS (
    INSERT INTO audit_log (at, tenant, job, run_id, action, actor, detail)
    SELECT clock.now, s.tenant, s.name, s.last_id, 'auto-pause', 'tickwork',
           jsonb_build_object('consecutiveDead', s.consecutive_dead,
                              'pauseAfterFailures', s.pause_after,
                              'error', s.last_error)
    FROM streak AS s, clock
    WHERE s.pausing
), events AS (
    -- Notifications (docs/operations.md, Notifications): a run gone dead, a job paused
    -- by its streak. A delivery run's own death notifies nobody (no loops).
    SELECT e.tenant, e.job, e.id AS run_id, 'dead' AS event, e.new_error AS error,
           NULL::integer AS consecutive_dead
    FROM ended AS e
    WHERE e.new_state = 'dead' AND e.job <> 'tickwork.notify'
    UNION ALL
    SELECT s.tenant, s.name, s.last_id, 'autoPaused', s.last_error, s.consecutive_dead
    FROM streak AS s
    WHERE s.pausing
), addressed AS (
    -- The job's own notify (its target, else the tenant's default, for the events it
    -- lists), or without one the tenant's default target for every event.
    SELECT ev.*, coalesce(d.spec -> 'notify' ->> 'target', t.name) AS target
    FROM events AS ev
    LEFT JOIN definitions AS d ON d.tenant = ev.tenant AND d.name = ev.job
    LEFT JOIN notification_targets AS t ON t.tenant = ev.tenant AND t.is_default
    WHERE d.spec -> 'notify' IS NULL
       OR coalesce(d.spec -> 'notify' -> 'on', '["dead", "autoPaused"]'::jsonb) ? ev.event
), planned AS (
    -- The run's public id (core.shards.format_run_id): the key is the same whichever
    -- shard a receiver hears from.
    SELECT nextval('run_ids') AS id, a.*, 'notify/' || a.event || '/' || public.id AS key,
           public.id AS public_id
    FROM addressed AS a,
         LATERAL (SELECT 'r' || m.shard || '-' || a.run_id AS id FROM shard_meta AS m) AS public
    WHERE a.target IS NOT NULL
), claimed AS (
    -- The key is the event's: the same event twice makes one delivery.
    INSERT INTO run_keys (tenant, job, idempotency_key, run_id, created_at)
    SELECT p.tenant, 'tickwork.notify', p.key, p.id, clock.now
    FROM planned AS p, clock
    ON CONFLICT DO NOTHING
    RETURNING run_id
), deliveries AS (
    -- The system job's retry: 20 attempts, full jitter from 5 s up to 5 minutes, so a
    -- receiver down for an hour still gets every notification.
    INSERT INTO live_runs (id, tenant, job, queue, priority, state, origin, max_attempts,
                           retry_base, retry_max, timeout_seconds, due_at, ready_at,
                           idempotency_key, payload, created_at, updated_at)
    SELECT p.id, p.tenant, 'tickwork.notify', 'tickwork-notifications', 0, 'ready', 'api',
           20, 5, 300, 60, clock.now, clock.now, p.key,
           jsonb_strip_nulls(jsonb_build_object(
               'event', p.event, 'tenant', p.tenant, 'job', p.job, 'runId', p.public_id,
               'error', p.error, 'consecutiveDead', p.consecutive_dead,
               'target', p.target, 'at', clock.now)),
           clock.now, clock.now
    FROM planned AS p, clock
    WHERE p.id IN (SELECT run_id FROM claimed)
    RETURNING queue
), woken AS (
    -- One row whatever it counts: joined below so that it runs.
    SELECT count(pg_notify('tickwork_ready', current_schema() || ' ' || queue)) AS sent
    FROM (SELECT DISTINCT queue FROM deliveries) AS q
)
INSERT INTO attempts (run_id, attempt, fencing_token, worker_id, leased_at, finished_at,
                      outcome, result_state, next_attempt_at, error)
SELECT id, attempt, fencing_token, lease_owner, leased_at, clock.now, outcome, state,
       CASE WHEN state = 'retry_wait' THEN ready_at END, error
FROM changed, clock, woken
RETURNING run_id, fencing_token, result_state, next_attempt_at

-- name: record_snoozes
-- Snoozes of locked leased runs ($1 ids, $2 tokens, $3 delays in seconds, pairwise; $4
-- now): each run waits in retry_wait until its delay has passed, as a retried run does,
-- but its attempt is given back (the next lease carries the same attempt number, with
-- a new fencing token) and it counts one more snooze. Its starting deadline is met (the
-- run started), so the deadline skip of unstarted runs leaves it alone. The lease's
-- record in attempts says `snoozed`, under the attempt number it had.
WITH clock AS (
    SELECT coalesce($4::timestamptz, now()) AS now
), snoozed AS (
    UPDATE live_runs AS r
    SET state = 'retry_wait',
        attempt = r.attempt - 1,
        snoozes = r.snoozes + 1,
        ready_at = clock.now
            + make_interval(secs => ($3::double precision[])[array_position($1::bigint[], r.id)]),
        start_deadline = NULL,
        lease_expires_at = NULL,
        updated_at = clock.now
    FROM clock
    WHERE r.id = ANY($1::bigint[])
      AND r.fencing_token = ($2::bigint[])[array_position($1::bigint[], r.id)]
      AND r.state = 'leased'
    RETURNING r.id, r.tenant, r.job, r.attempt + 1 AS attempt, r.fencing_token,
              r.lease_owner, r.leased_at, r.ready_at
), marked AS (
    -- Status: these jobs' runs changed (nothing written for a job already in the set).
    INSERT INTO changed_jobs (tenant, job)
    SELECT DISTINCT tenant, job FROM snoozed
    ON CONFLICT DO NOTHING
)
INSERT INTO attempts (run_id, attempt, fencing_token, worker_id, leased_at, finished_at,
                      outcome, result_state, next_attempt_at)
SELECT id, attempt, fencing_token, lease_owner, leased_at, clock.now, 'snoozed',
       'retry_wait', ready_at
FROM snoozed, clock
RETURNING run_id, fencing_token, result_state, next_attempt_at, true AS snoozed

-- name: lock_definitions_of_runs
-- Before record_failures ends runs dead: the definitions of their jobs ($1 run ids,
-- locked by the caller), locked in (tenant, name) order, so the streak each dead run
-- adds to is counted exactly and two transactions never wait on each other in a cycle.
SELECT d.tenant, d.name
FROM definitions AS d
WHERE (d.tenant, d.name) IN (SELECT r.tenant, r.job FROM live_runs AS r
                             WHERE r.id = ANY($1::bigint[]))
ORDER BY d.tenant, d.name
FOR UPDATE

-- name: completion_of
-- What an earlier completion with this token answered (for idempotent repeats).
SELECT result_state, next_attempt_at, outcome = 'snoozed' AS snoozed
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
