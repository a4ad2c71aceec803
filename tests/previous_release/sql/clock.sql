-- The database clock.

-- name: database_now
-- The instant a statement sees: the pinned one ($1, tests), else the database's now().
SELECT coalesce($1::timestamptz, now())
