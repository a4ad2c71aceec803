-- Queue-wide rate limits set on the dispatcher (store/queue_rates.py): each limited
-- queue's sliding window lives on the queue's home shard, in rate_windows under tenant
-- '' and key `queue/<name>`, counted in slots of 1/64 of the period as job rate limits
-- are (leases.sql, claim_limited). A dispatcher takes leases from the window before it
-- claims, and gives back what it did not use.

-- name: lock_queue_window
-- The first statement of a take ($1 the window's key): takes on one window follow one
-- another, so the count that follows (a new snapshot) sees every earlier take.
SELECT pg_advisory_xact_lock(hashtextextended(chr(30) || $1::text, 0))

-- name: take_queue_window
-- Up to $4 leases from window $1 (limit $2 per $3 seconds), recorded in the slot of now
-- ($5, or the moment of the take: clock_timestamp(), not the transaction's start).
-- Answered: how many were granted, the slot they are recorded in (to give back the
-- unused ones), and how many the window held back.
WITH clock AS (
    SELECT coalesce($5::timestamptz, clock_timestamp()) AS now
), used AS (
    SELECT coalesce(sum(w.leased), 0)::integer AS n
    FROM rate_windows AS w, clock
    WHERE w.tenant = '' AND w.key = $1
      AND w.slot > clock.now - make_interval(secs => $3::double precision)
), take AS (
    SELECT least($4::integer, greatest($2::integer - used.n, 0)) AS n,
           to_timestamp(ceil(extract(epoch FROM clock.now)::double precision
                             / ($3::double precision / 64))
                        * ($3::double precision / 64)) AS slot
    FROM used, clock
), recorded AS (
    INSERT INTO rate_windows (tenant, key, slot, leased)
    SELECT '', $1, take.slot, take.n FROM take WHERE take.n > 0
    ON CONFLICT (tenant, key, slot) DO UPDATE SET leased = rate_windows.leased + excluded.leased
), expired AS (
    -- Kept a period longer than the window needs, as claim_limited does: a take whose
    -- now is older than one already made still counts its own window's slots.
    DELETE FROM rate_windows AS w
    USING clock
    WHERE w.tenant = '' AND w.key = $1
      AND w.slot <= clock.now - make_interval(secs => 2 * $3::double precision)
)
SELECT take.n AS granted, take.slot, $4::integer - take.n AS held_back FROM take

-- name: give_back_queue_window
-- $3 leases taken from window $1 in slot $2 and not used: no longer counted. No lock
-- needed: a take that counted them meanwhile was only stricter.
UPDATE rate_windows
SET leased = greatest(leased - $3::integer, 0)
WHERE tenant = '' AND key = $1 AND slot = $2::timestamptz
