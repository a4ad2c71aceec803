-- Tenant quotas: the shared enqueue rate bucket, and the pending-run count.

-- name: take_enqueue_tokens
-- Refill the tenant's bucket for the time since its last take ($3 runs/s, at most $4),
-- then take $6 tokens (an allowance ahead, never less than $2) if they are there, else
-- $2 (the call's own runs) if those are; a refused take takes nothing. One statement,
-- so concurrent takes from several dispatchers queue on the row and never overdraw.
-- `taken` is what this take got. Quota bookkeeping needs no durability (a crash at
-- worst forgets a few takes): the statement's own transaction commits without waiting
-- for its WAL flush (the setting lasts until that commit), in one round trip.
WITH clock AS (
    SELECT coalesce($5::timestamptz, clock_timestamp()) AS now
), relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), fresh AS (
    -- A new bucket holds the burst.
    SELECT CASE WHEN greatest($2::double precision, $6::double precision)
                     <= $4::double precision
                THEN greatest($2, $6)
                WHEN $2 <= $4 THEN $2
                ELSE 0 END AS take
)
INSERT INTO enqueue_buckets AS b (tenant, tokens, at, admitted, taken)
SELECT $1::text, $4 - fresh.take, clock.now, fresh.take > 0, fresh.take
FROM clock, fresh, relaxed
ON CONFLICT (tenant) DO UPDATE
SET tokens = least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at)) * $3)
             - CASE WHEN least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at))
                                                * $3) >= greatest($2, $6)
                    THEN greatest($2, $6)
                    WHEN least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at))
                                                * $3) >= $2
                    THEN $2
                    ELSE 0 END,
    at = greatest(b.at, excluded.at),
    admitted = least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at)) * $3)
               >= $2,
    taken = CASE WHEN least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at))
                                           * $3) >= greatest($2, $6)
                 THEN greatest($2, $6)
                 WHEN least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at))
                                           * $3) >= $2
                 THEN $2
                 ELSE 0 END
RETURNING admitted, tokens, taken

-- name: pending_runs_of_tenant
-- Runs of the tenant not yet finished nor leased, counted up to $2 (the limit).
SELECT count(*)
FROM (SELECT 1
      FROM live_runs
      WHERE tenant = $1 AND state IN ('scheduled', 'ready', 'retry_wait')
      LIMIT $2) AS pending
