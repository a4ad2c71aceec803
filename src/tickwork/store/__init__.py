"""The PostgreSQL store: one module per concept, SQL in ``sql/*.sql`` as named queries.

Every function takes an asyncpg connection of one shard and an optional ``now``: the
SQL reads ``coalesce($n::timestamptz, now())`` so production runs on the database
clock and tests pin exact instants.
"""
