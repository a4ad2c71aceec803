"""The database clock: every due-time comparison uses it, never a pod's clock.

``now(conn, None)`` is the database's ``now()``; a test pins an instant by passing it
(``FrozenClock.now()``), the way every statement reads ``coalesce($n, now())``.
"""

from __future__ import annotations

from datetime import datetime

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    database_now: str


async def now(conn: Connection, pinned: datetime | None = None) -> datetime:
    """The instant ``pinned`` stands for, or the database's own ``now()``."""
    instant = await conn.fetchval(SQL.database_now, pinned)
    assert isinstance(instant, datetime)
    return instant
