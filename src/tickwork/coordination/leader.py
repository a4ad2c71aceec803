"""Leader election over one ``coordination.k8s.io/v1`` Lease (the operator's,
``tickwork-operator`` in the install namespace): of the replicas running it, exactly one
leads at a time, and the others stand by to take over.

The Lease calls and their rules are the shard leases' (``coordination.kubernetes``):
taking and renewing are a replace conditional on the ``resourceVersion`` last read (a
409 means another replica wrote first, and it won), and a Lease expires
``leaseDurationSeconds`` after its ``renewTime``. The timing is the coordinator's
(``coordinator.Timing``): renew every 30 % of the duration, give a call up after half
of it, and stop leading ``skew`` (10 %) before the Lease can have expired for the
others, counted from when the last successful renewal was SENT. That deadline is a
timer, so a leader whose renewals hang or fail steps down on time whatever its loop is
waiting on; ``leading`` reads the clock itself, so a write gated on it is refused from
that instant.

A standby tries every renew interval and takes the Lease as soon as it has expired: a
dead or partitioned leader is replaced within the lease duration plus one renew
interval. On a clean stop the leader releases the Lease (after its caller has stopped
writing), so the standby takes over at its next try instead of waiting it out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeAlias

from tickwork.coordination.calls import Bounded
from tickwork.coordination.coordinator import Timing
from tickwork.core.testsignal import Signals, TestSignal

logger = logging.getLogger(__name__)

OPERATOR_LEASE: Final = "tickwork-operator"

Change: TypeAlias = Literal["acquired", "lost", "released"]
# Why a leader stopped leading without giving the Lease up.
LossReason: TypeAlias = Literal["expired", "taken"]


class LeaseHolder(Protocol):
    """One named Lease, taken, renewed and released (``KubernetesLeases``)."""

    async def hold_named(
        self, name: str, identity: str, lease_seconds: float, labels: dict[str, str]
    ) -> bool: ...

    async def release_named(self, name: str, identity: str, labels: dict[str, str]) -> None: ...


@dataclass
class ElectionSignals(Signals):
    """Test signals: every transition (``acquired``, ``lost:<reason>``, ``released``)
    and every try that went through (True: this replica holds the Lease)."""

    changed: TestSignal[str]
    tried: TestSignal[bool]

    @classmethod
    def create(cls) -> ElectionSignals:
        return cls(TestSignal("leadership change"), TestSignal("election try"))


class LeaderElection:
    def __init__(
        self,
        leases: LeaseHolder,
        identity: str,
        timing: Timing | None = None,
        *,
        name: str = OPERATOR_LEASE,
        labels: dict[str, str] | None = None,
        role: str = "operator",
        on_change: Callable[[Change, str], None] | None = None,
    ) -> None:
        """``role`` names the log actions (``{role}-leader-acquired`` and so on);
        ``on_change(change, reason)`` is called at every transition (metrics)."""
        self.leases = leases
        self.identity = identity
        self.timing = timing or Timing()
        self.timing.check()
        self.name = name
        self.labels = labels or {}
        self.role = role
        self.on_change = on_change
        self.transitions = 0  # times this replica became the leader
        self.test_signals = ElectionSignals.create()
        self._calls = Bounded()
        # Loop-clock instant until which this replica may act as the leader.
        self._valid_until: float | None = None
        self._answered: float | None = None  # loop-clock instant of the last answer
        self._expiry: asyncio.TimerHandle | None = None
        self._leading = asyncio.Event()
        self._standing_by = asyncio.Event()
        self._standing_by.set()

    # --- what the caller reads ---

    @property
    def leading(self) -> bool:
        """This replica holds the Lease and may write, now."""
        until = self._valid_until
        return until is not None and asyncio.get_running_loop().time() < until

    @property
    def reachable(self) -> bool:
        """A try went through within the last lease duration: this replica could take
        over if the leader went."""
        answered = self._answered
        loop = asyncio.get_running_loop()
        return answered is not None and loop.time() - answered < self.timing.lease_seconds

    @property
    def last_answer(self) -> float | None:
        """Loop-clock instant of the last try that went through (None: none yet)."""
        return self._answered

    async def wait_leading(self) -> None:
        await self._leading.wait()

    async def wait_standing_by(self) -> None:
        await self._standing_by.wait()

    # --- the loop ---

    async def run(self, stop: asyncio.Event) -> None:
        """Try for the Lease and renew it until ``stop``; then release it if held."""
        loop = asyncio.get_running_loop()
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                sent = loop.time()
                await self._try(sent)
                wait = max(0.0, sent + self.timing.renew - loop.time())
                await asyncio.wait({stopping}, timeout=wait)
        finally:
            stopping.cancel()
            await self._release()
            await self._calls.settle(self.timing.call)

    async def _try(self, sent: float) -> None:
        timing = self.timing
        try:
            held = await self._calls.within(
                timing.call,
                self.leases.hold_named(self.name, self.identity, timing.lease_seconds, self.labels),
            )
        except Exception as error:
            # Still leading until the deadline the last renewal gave (the timer ends it).
            logger.warning(
                "%s election: cannot reach the Lease %s: %s",
                self.role,
                self.name,
                error,
                extra={"action": f"{self.role}-leader-error", "leading": self.leading},
            )
            return
        self._answered = asyncio.get_running_loop().time()
        self.test_signals.tried.signal(held)
        if not held:
            if self._valid_until is not None:
                self._step_down("lost", "taken")
            return
        loop = asyncio.get_running_loop()
        until = sent + timing.lease_seconds - timing.skew
        if until <= loop.time():
            return  # the answer came too late to lead on; the timer has stepped down
        self._valid_until = until
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry = loop.call_at(until, self._expired)
        if not self._leading.is_set():
            self.transitions += 1
            self._leading.set()
            self._standing_by.clear()
            logger.info(
                "%s %s leads (Lease %s, term %d)",
                self.role,
                self.identity,
                self.name,
                self.transitions,
                extra={"action": f"{self.role}-leader-acquired", "term": self.transitions},
            )
            self._changed("acquired", "")

    def _expired(self) -> None:
        self._expiry = None
        if self._valid_until is not None:
            self._step_down("lost", "expired")

    def _step_down(self, change: Change, reason: str) -> None:
        self._valid_until = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if not self._leading.is_set():
            return
        self._leading.clear()
        self._standing_by.set()
        if change == "lost":
            why = (
                "another replica holds the Lease"
                if reason == "taken"
                else "the Lease could not be renewed in time"
            )
            logger.warning(
                "%s %s stopped leading: %s",
                self.role,
                self.identity,
                why,
                extra={"action": f"{self.role}-leader-lost", "reason": reason},
            )
        else:
            logger.info(
                "%s %s released the Lease %s",
                self.role,
                self.identity,
                self.name,
                extra={"action": f"{self.role}-leader-released"},
            )
        self._changed(change, reason)

    def _changed(self, change: Change, reason: str) -> None:
        self.test_signals.changed.signal(f"{change}:{reason}" if reason else change)
        if self.on_change is not None:
            self.on_change(change, reason)

    async def _release(self) -> None:
        held = self._valid_until is not None
        self._step_down("released", "")
        if not held:
            return
        try:
            await self._calls.within(
                self.timing.call,
                self.leases.release_named(self.name, self.identity, self.labels),
            )
        except Exception as error:
            # It expires on its own: the standby takes over within its duration.
            logger.warning(
                "%s %s could not release the Lease %s: %s",
                self.role,
                self.identity,
                self.name,
                error,
                extra={"action": f"{self.role}-leader-error"},
            )
