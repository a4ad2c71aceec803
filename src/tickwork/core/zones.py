"""IANA time zones, from the ``tzdata`` package and nowhere else.

``zoneinfo.ZoneInfo(name)`` reads the host's zoneinfo folder first: which names exist
(``right/UTC``, ``posix/Europe/Berlin``, folder names like ``Europe`` that fail with
``IsADirectoryError``) and which rules a zone has would then depend on the machine, and
one job could fire at different instants on different hosts. Every process here reads
the same database instead: the names listed by the ``tzdata`` package, and the rules
shipped with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from functools import cache
from importlib import resources
from typing import Final
from zoneinfo import ZoneInfo

__all__ = ["UnknownZone", "first_second", "get", "names", "offset"]

_SECOND: Final = timedelta(seconds=1)

# Names the database lists that stand for a machine's setting or for no place at all.
_NOT_PLACES: Final = frozenset({"Factory", "localtime", "posixrules"})

_lock: Final = threading.Lock()
_loaded: dict[str, ZoneInfo] = {}


class UnknownZone(ValueError):
    """A name that is not a zone of the database (or not a place)."""

    def __init__(self, name: str, *, not_a_place: bool = False) -> None:
        shown = name if len(name) <= 64 else name[:64] + "…"
        if not_a_place:
            message = f"time zone {shown!r} is not a place; use an IANA name like 'Europe/Berlin'"
        else:
            message = f"unknown time zone {shown!r} (expected an IANA name like 'Europe/Berlin')"
        super().__init__(message)
        self.name = name


@cache
def names() -> frozenset[str]:
    """Every zone name tickwork accepts."""
    listed = resources.files("tzdata").joinpath("zones").read_text("utf-8").split()
    return frozenset(listed) - _NOT_PLACES


def get(name: str) -> ZoneInfo:
    """The zone called ``name``, loaded once per process; ``UnknownZone`` otherwise."""
    found = _loaded.get(name)
    if found is not None:
        return found
    if name in _NOT_PLACES:
        raise UnknownZone(name, not_a_place=True)
    if name not in names():
        raise UnknownZone(name)
    with _lock:
        found = _loaded.get(name)
        if found is None:
            # A listed name is a file of the package: no path of the caller's making
            # ever reaches the file system.
            data = resources.files("tzdata").joinpath("zoneinfo")
            for part in name.split("/"):
                data = data.joinpath(part)
            with data.open("rb") as stream:
                found = ZoneInfo.from_file(stream, key=name)
            _loaded[name] = found
    return found


def offset(instant: datetime, zone: tzinfo) -> timedelta:
    """``zone``'s UTC offset at ``instant``."""
    found = instant.astimezone(zone).utcoffset()
    assert found is not None  # a ZoneInfo always knows its offset
    return found


def first_second(
    before: datetime, after: datetime, reached: Callable[[datetime], bool]
) -> datetime:
    """The first whole second in ``(before, after]`` at which ``reached`` holds (an
    offset change, say), found by halving: ``reached`` holds at ``after``, not at
    ``before``, and once it holds it goes on holding. A day apart takes about 17 halvings."""
    while after - before > _SECOND:
        middle = (before + (after - before) / 2).replace(microsecond=0)
        if middle <= before:
            middle = before + _SECOND
        if reached(middle):
            after = middle
        else:
            before = middle
    return after
