"""The coordination seam: what a backend keeps (a lease per shard and a membership
lease per replica) and the four things the coordinator asks of it.

A lease has a holder and expires ``lease_seconds`` after its last renewal unless
renewed; anyone may take a lease that is free (never taken, or released) or expired,
and only its holder may renew it. Taking and renewing are one compare-and-set
(``hold``): of several replicas racing for a lease, exactly one wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

SHARD_LEASE_PREFIX: Final = "tickwork-shard-"
MEMBER_LEASE_PREFIX: Final = "tickwork-member-"


@dataclass(frozen=True, slots=True)
class LeaseState:
    """A shard's lease as last read."""

    shard: int
    holder: str | None  # None: free (never taken, or released)
    # Seconds until it expires, as the backend judges it (<= 0: expired; None: free).
    remaining: float | None
    transitions: int = 0

    def takeable_by(self, identity: str) -> bool:
        """Free, expired, or already ``identity``'s."""
        return (
            self.holder is None
            or self.holder == identity
            or self.remaining is None
            or self.remaining <= 0
        )


@dataclass(frozen=True, slots=True)
class Observation:
    """One look at the coordination state."""

    leases: Mapping[int, LeaseState]
    members: frozenset[str]  # live (unexpired) membership leases, the caller's included
    # Shards whose lease could not be read this time (the postgres backend: the shard's
    # database is down): nobody can take them now.
    unreachable: frozenset[int] = field(default_factory=frozenset)


class Backend(Protocol):
    """Where leases live. Every call may raise (the backend is unreachable); the
    coordinator bounds each in time and carries on."""

    name: str

    async def observe(self, identity: str, lease_seconds: float) -> Observation:
        """Renew ``identity``'s membership lease, then read every shard lease and the
        live members."""

    async def hold(self, shard: int, identity: str, lease_seconds: float) -> bool:
        """Take the shard's lease for ``identity`` if it is free, expired or already
        its own (renewing it); False when another replica holds it or won the race."""

    async def release(self, shard: int, identity: str) -> None:
        """Free the shard's lease if ``identity`` holds it (clean shutdown, shedding)."""

    async def leave(self, identity: str) -> None:
        """Withdraw ``identity``'s membership (clean shutdown)."""

    async def close(self) -> None:
        """Let go of connections and clients."""


def shard_lease_name(shard: int) -> str:
    return f"{SHARD_LEASE_PREFIX}{shard}"
