"""Throughput benchmarks: ``make bench`` (``python -m bench``).

A benchmark module registers cases with :func:`register`; each case gets a fresh,
empty database of its own (:class:`Context`) and returns tables of rows to print. A
case is a plain function or a coroutine function, so a case that drives worker
processes (and calls ``asyncio.run`` itself) fits as well as an asyncio one::

    @register("store", "claim + complete straight against the store")
    async def claim_complete(context: Context) -> list[Table]:
        shard_map = await context.migrate(1)
        ...
        return [Table("claim + complete", rows)]

Modules are listed in ``bench.__main__.MODULES``; ``--only NAME`` runs one case.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from tickwork.core.shards import ShardMap

Row: TypeAlias = dict[str, Any]


@dataclass(frozen=True)
class Table:
    """One printed table: the columns are the keys of the first row, in order."""

    title: str
    rows: Sequence[Row]
    notes: Sequence[str] = ()


@dataclass(frozen=True)
class Context:
    """What a case runs against: a database nobody else uses, dropped afterwards."""

    database_url: str
    seconds: float  # the wanted length of each measurement
    # The headline figures of the whole run (shared by every case): printed as the
    # summary table and written to bench-results.json.
    figures: dict[str, float] = field(default_factory=dict)
    # A check that the case runs (``--smoke``), not a measurement: the waits that are
    # there only to make the figures meaningful (processes starting, a load settling,
    # the top of a minute) are left out.
    smoke: bool = False

    async def migrate(self, shards: int) -> ShardMap:
        """Migrate ``shards`` shards (one schema each) in the case's database."""
        from tickwork.store import migrate

        shard_map = ShardMap.from_dsns([self.database_url], shards)
        await migrate.migrate_all(shard_map.shards)
        return shard_map


CaseResult: TypeAlias = list[Table]
CaseFunction: TypeAlias = Callable[[Context], Awaitable[CaseResult] | CaseResult]


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    run: CaseFunction = field(repr=False)
    # Run by a plain ``make bench``; the others only when named with ``--only``.
    default: bool = True
    # The case whose measurements this one takes alone (a smoke run of both runs that one).
    part_of: str | None = None


CASES: list[Case] = []


def register(
    name: str, description: str, *, default: bool = True, part_of: str | None = None
) -> Callable[[CaseFunction], CaseFunction]:
    """Add the decorated function to the cases ``python -m bench`` runs, in order."""

    def add(function: CaseFunction) -> CaseFunction:
        if any(case.name == name for case in CASES):
            raise ValueError(f"benchmark case {name!r} registered twice")
        CASES.append(Case(name, description, function, default, part_of))
        return function

    return add


def format_table(table: Table) -> str:
    """Plain text: a title, a header, right-aligned numbers, then the notes."""
    lines = [table.title, ""]
    if table.rows:
        columns = list(table.rows[0])
        cells = [[_cell(row.get(column)) for column in columns] for row in table.rows]
        widths = [
            max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)
        ]
        numeric = [
            all(isinstance(row.get(column), int | float) for row in table.rows)
            for column in columns
        ]

        def line(values: Sequence[str]) -> str:
            return "  ".join(
                value.rjust(width) if right else value.ljust(width)
                for value, width, right in zip(values, widths, numeric, strict=True)
            ).rstrip()

        lines.append(line(columns))
        lines.append(line(["-" * width for width in widths]))
        lines.extend(line(values) for values in cells)
    else:
        lines.append("(no rows)")
    lines.extend(f"  {note}" for note in table.notes)
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)
