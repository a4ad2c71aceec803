"""What a writer (the scheduler) asks of shard ownership, and what it is told.

A shard is owned for a ``term``: each time a replica comes to own a shard (again) the
term is new, and the writer takes the shard's epoch anew before writing
(``store.epochs``). ``owns(shard, term)`` turns false the moment the replica may no
longer write: the lease was lost, is being shed, or could not be renewed in time.
The writer holds ``lock(shard)`` while it works on the shard, so shedding and the
release at shutdown wait for the transaction in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

LossReason: TypeAlias = Literal["expired", "taken", "deposed"]
ReleaseReason: TypeAlias = Literal["shed", "shutdown"]


@dataclass(frozen=True, slots=True)
class Acquired:
    shard: int
    term: int
    # The lease had another holder before (Kubernetes counts these in leaseTransitions).
    transition: bool


@dataclass(frozen=True, slots=True)
class Lost:
    """The replica stopped owning a shard without giving it up: its lease expired
    before it could renew it, another replica holds it, or its epoch was taken."""

    shard: int
    term: int
    reason: LossReason


@dataclass(frozen=True, slots=True)
class Released:
    shard: int
    term: int
    reason: ReleaseReason


@dataclass(frozen=True, slots=True)
class Observed:
    """One coordination round: the live members seen, the aim, the shards owned."""

    members: int
    aim: int
    owned: int


@dataclass(frozen=True, slots=True)
class Failed:
    """A call to the backend failed or did not answer in time."""

    operation: str
    shard: int | None
    outage: bool


Event: TypeAlias = Acquired | Lost | Released | Observed | Failed


class Ownership(Protocol):
    identity: str

    def owned(self) -> Mapping[int, int]:
        """The shards this replica may write to now, with their terms."""

    def owns(self, shard: int, term: int) -> bool:
        """Whether it may still write to ``shard`` for ``term``."""

    def lock(self, shard: int) -> asyncio.Lock:
        """Held by the writer while it works on ``shard``."""

    def deposed(self, shard: int, term: int) -> None:
        """The writer found the shard's epoch taken by another: stop owning it."""

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener`` with every event (acquisitions wake the writer)."""

    async def run(self, stop: asyncio.Event) -> None:
        """Keep ownership current until ``stop``; then give everything up."""


class Fixed:
    """Ownership without coordination: these shards, always (a single scheduler
    embedded in a test or a tool). A shard whose epoch was taken by another writer
    is taken back at the next pass, under a new term."""

    def __init__(self, shards: Collection[int], identity: str = "scheduler") -> None:
        self.identity = identity
        self._terms = dict.fromkeys(shards, 1)
        self._locks: dict[int, asyncio.Lock] = {}
        self._listeners: list[Callable[[Event], None]] = []

    def owned(self) -> Mapping[int, int]:
        return dict(self._terms)

    def owns(self, shard: int, term: int) -> bool:
        return self._terms.get(shard) == term

    def lock(self, shard: int) -> asyncio.Lock:
        return self._locks.setdefault(shard, asyncio.Lock())

    def deposed(self, shard: int, term: int) -> None:
        if self._terms.get(shard) == term:
            self._terms[shard] = term + 1
            for listener in self._listeners:
                listener(Lost(shard, term, "deposed"))

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        self._listeners.append(listener)

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()
