-- The postgres coordination backend: the shard's lease and the scheduler members, in
-- the shard's own schema. Every instant is the database's (or the pinned $now).

-- name: read_shard_lease
-- The lease and the seconds until it expires (negative: expired; NULL: never taken).
SELECT holder, lease_seconds, acquired_at, renewed_at, transitions,
       extract(epoch FROM renewed_at + make_interval(secs => lease_seconds)
                          - coalesce($1::timestamptz, now()))::double precision AS remaining
FROM shard_lease

-- name: hold_shard_lease
-- Take the lease ($1 the holder, $2 its duration) when it is free, expired or already
-- $1's; no row when another holder's lease has not expired. The compare and the set are
-- one statement: of two replicas racing for a free lease, one updates and the other,
-- re-reading the row after the first commits, matches nothing.
WITH clock AS (
    SELECT coalesce($3::timestamptz, now()) AS now
)
UPDATE shard_lease AS l
SET holder = $1,
    lease_seconds = $2,
    acquired_at = CASE WHEN l.holder IS DISTINCT FROM $1 OR l.acquired_at IS NULL
                       THEN clock.now ELSE l.acquired_at END,
    renewed_at = clock.now,
    transitions = l.transitions
        + CASE WHEN l.holder IS DISTINCT FROM $1 AND l.acquired_at IS NOT NULL
               THEN 1 ELSE 0 END
FROM clock
WHERE l.holder IS NULL
   OR l.holder = $1
   OR l.renewed_at + make_interval(secs => l.lease_seconds) <= clock.now
RETURNING l.holder, l.transitions

-- name: release_shard_lease
-- Give the lease up (clean shutdown, or shedding a shard): free at once for the others.
UPDATE shard_lease
SET holder = NULL, renewed_at = coalesce($2::timestamptz, now())
WHERE holder = $1
RETURNING transitions

-- name: announce_member
INSERT INTO scheduler_members (identity, lease_seconds, renewed_at)
VALUES ($1, $2, coalesce($3::timestamptz, now()))
ON CONFLICT (identity) DO UPDATE
SET lease_seconds = excluded.lease_seconds, renewed_at = excluded.renewed_at

-- name: live_members
SELECT identity
FROM scheduler_members
WHERE renewed_at + make_interval(secs => lease_seconds) > coalesce($1::timestamptz, now())

-- name: forget_departed_members
-- Rows of replicas gone for an hour (killed, never back) are forgotten.
DELETE FROM scheduler_members
WHERE renewed_at + make_interval(secs => lease_seconds)
      < coalesce($1::timestamptz, now()) - interval '1 hour'

-- name: leave_members
DELETE FROM scheduler_members WHERE identity = $1
