-- Tenant quotas: the shared enqueue rate bucket, and the pending-run count.

-- name: take_enqueue_tokens
-- Refill the tenant's bucket for the time since its last take ($3 runs/s, at most $4),
-- then take $2 tokens if they are there; a refused take takes nothing. One statement,
-- so concurrent takes from several dispatchers queue on the row and never overdraw.
WITH clock AS (
    SELECT coalesce($5::timestamptz, clock_timestamp()) AS now
)
INSERT INTO enqueue_buckets AS b (tenant, tokens, at, admitted)
SELECT $1::text,
       CASE WHEN $2::double precision <= $4::double precision THEN $4 - $2 ELSE $4 END,
       clock.now, $2 <= $4
FROM clock
ON CONFLICT (tenant) DO UPDATE
SET tokens = CASE
        WHEN least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at)) * $3::double precision)
             >= $2
        THEN least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at)) * $3)
             - $2
        ELSE least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at)) * $3)
        END,
    at = greatest(b.at, excluded.at),
    admitted = least($4, b.tokens + greatest(0, extract(epoch FROM excluded.at - b.at)) * $3)
               >= $2
RETURNING admitted, tokens

-- name: pending_runs_of_tenant
-- Runs of the tenant not yet finished nor leased, counted up to $2 (the limit).
SELECT count(*)
FROM (SELECT 1
      FROM live_runs
      WHERE tenant = $1 AND state IN ('scheduled', 'ready', 'retry_wait')
      LIMIT $2) AS pending

-- name: async_commit
-- Quota bookkeeping needs no durability: see quotas.take_enqueue_tokens.
SET LOCAL synchronous_commit TO off
