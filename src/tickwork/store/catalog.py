"""The canonical shard schema: what every migrated shard must look like.

``schema.sql`` beside this module is the schema of a freshly migrated shard as the
database describes it (``describe``: columns, constraints, indexes, views, sequences,
functions and the migrations applied, without the schema's name). ``make schema``
rewrites it after a new migration; the migration tests check that every shard,
migrated from zero or upgraded from any older version, describes itself exactly so.
A change to the schema therefore shows up in review as a diff of that file.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from tickwork.store import queries
from tickwork.store.database import Connection


class SQL(queries.Statements):
    describe_schema: str


HEADER: Final = (
    "-- The schema of one tickwork shard, as a freshly migrated shard describes itself.\n"
    "-- Written by `make schema`; the migration tests check every migrated shard against\n"
    "-- it. Do not edit it by hand: write a migration, then run `make schema`.\n"
)


async def describe(conn: Connection) -> str:
    """The schema on ``conn``'s search path, as the text of ``schema.sql``."""
    rows = await conn.fetch(SQL.describe_schema)
    lines = [HEADER.rstrip("\n")]
    group: tuple[int, str] | None = None
    for row in rows:
        # One paragraph per object; the migrations applied make the first one.
        key = (row["section"], row["object"] if row["section"] > 1 else "")
        if key != group:
            lines.append("")
            group = key
        lines.append(row["text"])
    return "\n".join(lines) + "\n"


def canonical() -> str:
    """The text of ``schema.sql``, as shipped with this release."""
    return resources.files("tickwork.store").joinpath("schema.sql").read_text("utf-8")
