"""How many shards a replica aims at, and which ones it takes or sheds. Pure.

Each replica aims at ``ceil(S / live members)``. With that target the shards always
fit (members x target >= S), so a replica below it takes free or expired shards, a
replica above it sheds its extras, and nobody ever takes a lease that is held and
running: ownership converges without stealing. Which shards a replica prefers is a
rendezvous hash of (identity, shard): contenders starting together mostly reach for
different shards, and a replica that comes back under the same identity (a pod of a
StatefulSet) prefers the shards it had.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection
from typing import Final

from tickwork.coordination.backend import Observation
from tickwork.core import hashing

OWNER_PURPOSE: Final = b"tickwork.owner"


def target(shard_count: int, members: int) -> int:
    """The shards each of ``members`` live replicas aims at."""
    return math.ceil(shard_count / max(1, members))


def preference(identity: str, shard: int) -> int:
    return hashing.stable_hash(f"{identity}/{shard}", OWNER_PURPOSE)


def to_take(
    identity: str,
    shard_count: int,
    held: Collection[int],
    observation: Observation,
    aim: int,
) -> list[int]:
    """The shards to try to take now: free, expired or still ours by the backend,
    most preferred first, as many as ``held`` is short of ``aim``."""
    wanted = aim - len(held)
    if wanted <= 0:
        return []
    candidates = [
        shard
        for shard in range(shard_count)
        if shard not in held
        and shard not in observation.unreachable
        and (shard not in observation.leases or observation.leases[shard].takeable_by(identity))
    ]
    candidates.sort(key=lambda shard: preference(identity, shard), reverse=True)
    return candidates[:wanted]


def to_shed(identity: str, held: Collection[int], aim: int) -> list[int]:
    """The extras over ``aim``, least preferred first."""
    extra = len(held) - aim
    if extra <= 0:
        return []
    return sorted(held, key=lambda shard: preference(identity, shard))[:extra]


def settling(observation: Observation, aim: int) -> bool:
    """Whether some replica holds more than ``aim``: shards will be shed soon, and a
    replica short of its aim should look again sooner than usual."""
    holding = Counter(
        lease.holder
        for lease in observation.leases.values()
        if lease.holder is not None and lease.remaining is not None and lease.remaining > 0
    )
    return any(count > aim for count in holding.values())


def next_expiry(observation: Observation, identity: str) -> float | None:
    """Seconds until the first lease held by another replica expires (None: none)."""
    running = [
        lease.remaining
        for lease in observation.leases.values()
        if lease.holder not in (None, identity)
        and lease.remaining is not None
        and lease.remaining > 0
    ]
    return min(running) if running else None
