"""Records made once per run on the lease, heartbeat and complete paths.

A frozen dataclass sets each field through ``object.__setattr__`` in its ``__init__``:
about ten times the cost of plain slot stores, which at 17 fields was several
microseconds per run, a measurable share of a dispatcher's or a worker's CPU per run
(``make profile``). These records are dataclasses with slots that are not frozen: they
are hashable and compare by value as before, and nothing assigns to them once made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(eq_default=True)
def hot_record(cls: type[T]) -> type[T]:
    """``@dataclass(slots=True, unsafe_hash=True)``: a per-run record, read-only by
    convention (see the module's docstring)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
