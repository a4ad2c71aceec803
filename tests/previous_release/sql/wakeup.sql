-- The listening connections of store/wakeup.py.

-- name: listener_probe
-- A round trip: a hung link sends no termination, only an unanswered probe tells.
SELECT 1
