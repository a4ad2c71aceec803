"""Named SQL queries, loaded once from ``sql/*.sql``.

A file holds blocks that start with ``-- name: <query_name>``; the text up to the next
marker is the query. Queries take ``$n`` parameters only: no SQL is built from strings.
A module names the queries it runs once, as the attributes of a ``Statements`` class.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Final

_MARKER: Final = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text: str, source: str) -> dict[str, str]:
    """Split one ``.sql`` file into its named queries."""
    found: dict[str, str] = {}
    parts = _MARKER.split(text)
    if parts[0].strip() and not all(
        line.startswith("--") or not line.strip() for line in parts[0].splitlines()
    ):
        raise ValueError(f"{source}: SQL before the first '-- name:' marker")
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise ValueError(f"{source}: query {name!r} defined twice")
        query = body.strip()
        if not query:
            raise ValueError(f"{source}: query {name!r} is empty")
        found[name] = query
    return found


@cache
def all_queries() -> Mapping[str, str]:
    """Every named query of the package, across files (names are unique)."""
    found: dict[str, str] = {}
    folder = resources.files("tickwork.store").joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, query in parse(entry.read_text("utf-8"), entry.name).items():
            if name in found:
                raise ValueError(f"{entry.name}: query {name!r} already defined elsewhere")
            found[name] = query
    return found


def get(name: str) -> str:
    return all_queries()[name]


class Statements:
    """The queries a module runs, each named once: every attribute a subclass annotates
    is the query of that name, looked up when the class is made, so a name no ``.sql``
    file defines fails the import rather than the first call."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in vars(cls).get("__annotations__", {}):
            setattr(cls, name, get(name))
