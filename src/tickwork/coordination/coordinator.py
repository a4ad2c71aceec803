"""The coordinator of one scheduler replica: holds shard leases through a backend,
balances them between the live replicas, and tells the writer which shards it may
write to.

Every round (about every ``renew_seconds``):

1. announce this replica (its membership lease) and read every lease;
2. renew the leases it holds; one it can no longer renew in time is given up for
   writing ``skew_seconds`` before it can have expired for the others (the holder's
   deadline is counted from when it SENT its last successful renewal);
3. shed the shards over ``ceil(S / live members)``, after two rounds over it in a row
   (no flapping on a membership seen for one round), each only once the writer's
   pass over it has ended, releasing the lease so the next owner need not wait;
4. take free or expired shards while under the aim, the most preferred first.

A replica short of its aim looks again as soon as another's lease can expire, and
sooner than usual while others are shedding, so a dead replica's shards are re-owned
within the lease duration and a shed shard almost at once. On ``stop`` every lease is
released (after the writer's pass in flight) and the membership withdrawn.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from tickwork.coordination import balance
from tickwork.coordination.backend import Backend, Observation
from tickwork.coordination.calls import Bounded
from tickwork.coordination.ownership import (
    Acquired,
    Event,
    Failed,
    LossReason,
    Lost,
    Observed,
    Released,
    ReleaseReason,
)
from tickwork.core.testsignal import Signals, TestSignal

logger = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS: Final = 10.0


@dataclass(frozen=True, slots=True)
class Timing:
    """Lease timing. Defaults follow the lease duration: renew every 30 % of it (3 s
    of 10 s), stop writing 10 % of it (1 s) before the lease can have expired for the
    others (the clock skew between replicas this tolerates), and give up on a call
    after half of it."""

    lease_seconds: float = DEFAULT_LEASE_SECONDS
    renew_seconds: float | None = None
    skew_seconds: float | None = None
    call_seconds: float | None = None

    @property
    def renew(self) -> float:
        return self.renew_seconds if self.renew_seconds is not None else self.lease_seconds * 0.3

    @property
    def skew(self) -> float:
        return self.skew_seconds if self.skew_seconds is not None else self.lease_seconds * 0.1

    @property
    def call(self) -> float:
        return self.call_seconds if self.call_seconds is not None else self.lease_seconds * 0.5

    def check(self) -> None:
        if self.lease_seconds <= 0:
            raise ValueError("the lease duration must be positive")
        if not 0 <= self.skew < self.lease_seconds / 2:
            raise ValueError("the clock skew margin must be under half the lease duration")
        if not 0 < self.renew < self.lease_seconds - self.skew:
            raise ValueError("leases must be renewed well within their duration")


@dataclass
class _Held:
    term: int
    # Monotonic instant until which this replica may write: when it sent its last
    # successful renewal, plus the lease duration, minus the skew margin.
    valid_until: float
    shedding: bool = False


@dataclass
class CoordinatorSignals(Signals):
    """Test signals: a round ended (its number); a shard taken, lost (with the
    reason) or released (with the reason)."""

    cycled: TestSignal[int]
    acquired: TestSignal[int]
    lost: TestSignal[tuple[int, str]]
    released: TestSignal[tuple[int, str]]

    @classmethod
    def create(cls) -> CoordinatorSignals:
        return cls(
            TestSignal("coordination round"),
            TestSignal("shard acquired"),
            TestSignal("shard lost"),
            TestSignal("shard released"),
        )


class Coordinator:
    """Shard ownership through leases (the ``Ownership`` a scheduler writes under)."""

    def __init__(
        self,
        backend: Backend,
        identity: str,
        shard_count: int,
        timing: Timing | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.identity = identity
        self.shard_count = shard_count
        self.timing = timing or Timing()
        self.timing.check()
        self.members: frozenset[str] = frozenset({identity})
        self.aim = shard_count
        self.rounds = 0
        self.last_observed: float | None = None  # monotonic instant of the last good look
        # Shards whose lease could not be read in the last round (postgres: their
        # database is down or hanging).
        self.unreachable: frozenset[int] = frozenset()
        self.test_signals = CoordinatorSignals.create()
        self._monotonic = monotonic
        self._held: dict[int, _Held] = {}
        self._terms = itertools.count(1)
        self._locks: dict[int, asyncio.Lock] = {}
        self._listeners: list[Callable[[Event], None]] = []
        self._over = 0  # consecutive rounds over the aim
        self._shedding: set[asyncio.Task[None]] = set()
        self._calls = Bounded()

    # --- what the writer asks ---

    def owned(self) -> Mapping[int, int]:
        now = self._monotonic()
        return {
            shard: held.term
            for shard, held in self._held.items()
            if not held.shedding and held.valid_until > now
        }

    def owns(self, shard: int, term: int) -> bool:
        held = self._held.get(shard)
        return (
            held is not None
            and held.term == term
            and not held.shedding
            and held.valid_until > self._monotonic()
        )

    def held(self) -> list[int]:
        """Every shard whose lease this replica holds, being shed or not."""
        return sorted(self._held)

    def lock(self, shard: int) -> asyncio.Lock:
        return self._locks.setdefault(shard, asyncio.Lock())

    def deposed(self, shard: int, term: int) -> None:
        held = self._held.get(shard)
        if held is not None and held.term == term:
            self._lose(shard, "deposed")

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        self._listeners.append(listener)

    async def shed_settled(self) -> None:
        """Wait until the shards being shed are released."""
        await asyncio.gather(*self._shedding, return_exceptions=True)

    # --- the loop ---

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds until ``stop``; then every lease released and the membership
        withdrawn."""
        try:
            while not stop.is_set():
                pause = await self.cycle()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
        finally:
            await self.shutdown()

    async def cycle(self) -> float:
        """One round; returns the seconds until the next one."""
        timing = self.timing
        started = self._monotonic()
        observation: Observation | None = None
        try:
            observation = await self._calls.within(
                timing.call, self.backend.observe(self.identity, timing.lease_seconds)
            )
        except Exception as error:
            self._failed("observe", None, error)
        self._expire()
        if observation is not None:
            self.last_observed = started
            self.unreachable = observation.unreachable
            self.members = observation.members | {self.identity}
            self.aim = balance.target(self.shard_count, len(self.members))
            for shard in list(self._held):
                lease = observation.leases.get(shard)
                if lease is not None and lease.holder != self.identity:
                    self._lose(shard, "taken")
        await asyncio.gather(*(self._renew(shard) for shard in list(self._held)))
        pause = timing.renew
        if observation is not None:
            self._shed_extras()
            wanted = balance.to_take(
                self.identity, self.shard_count, self._held, observation, self.aim
            )
            await asyncio.gather(*(self._take(shard, observation) for shard in wanted))
            keeping = sum(not held.shedding for held in self._held.values())
            if keeping < self.aim:
                if balance.settling(observation, self.aim):
                    pause = min(pause, timing.renew / 4)
                expiry = balance.next_expiry(observation, self.identity)
                if expiry is not None:
                    # Just after it expires, counted from when it was read.
                    since = self._monotonic() - started
                    pause = min(pause, max(0.0, expiry - since) + 0.01)
            self._emit(Observed(len(self.members), self.aim, len(self.owned())))
        self.rounds += 1
        self.test_signals.cycled.signal(self.rounds)
        return max(0.01, pause)

    async def shutdown(self) -> None:
        """Release every lease (each once the writer's pass over it has ended) and
        withdraw the membership; bounded, so a hung backend cannot hold up an exit."""
        for task in list(self._shedding):
            task.cancel()
        await asyncio.gather(*self._shedding, return_exceptions=True)
        await asyncio.gather(
            *(self._release(shard, "shutdown") for shard in list(self._held)),
            return_exceptions=True,
        )
        try:
            await self._calls.within(self.timing.call, self.backend.leave(self.identity))
        except Exception as error:
            self._failed("leave", None, error)
        await self._calls.settle(self.timing.call)

    # --- the steps ---

    async def _hold(self, shard: int, operation: str) -> tuple[bool, float] | None:
        """One bounded ``hold`` of the shard's lease (a renewal or a take): whether it
        held, and until when this replica may then write (counted from when the call
        was SENT); None when the call failed (reported as ``operation``)."""
        sent = self._monotonic()
        try:
            ok = await self._calls.within(
                self.timing.call,
                self.backend.hold(shard, self.identity, self.timing.lease_seconds),
            )
        except Exception as error:
            self._failed(operation, shard, error)
            return None
        return ok, sent + self.timing.lease_seconds - self.timing.skew

    async def _renew(self, shard: int) -> None:
        held = self._held.get(shard)
        if held is None:
            return
        answer = await self._hold(shard, "renew")
        if answer is None or self._held.get(shard) is not held:
            return  # failed (the deadline stands), or lost or released meanwhile
        ok, valid_until = answer
        if not ok:
            self._lose(shard, "taken")
        elif held.valid_until <= self._monotonic():
            # The answer came after the deadline: writing stopped, so this is a new term.
            self._lose(shard, "expired")
        else:
            held.valid_until = valid_until

    async def _take(self, shard: int, observation: Observation) -> None:
        answer = await self._hold(shard, "acquire")
        if answer is None or not answer[0] or shard in self._held:
            return
        term = next(self._terms)
        self._held[shard] = _Held(term, answer[1])
        before = observation.leases.get(shard)
        transition = before is not None and before.holder not in (None, self.identity)
        logger.info(
            "shard %d acquired (term %d)",
            shard,
            term,
            extra={"action": "shard-acquired", "shard": shard, "identity": self.identity},
        )
        self.test_signals.acquired.signal(shard)
        self._emit(Acquired(shard, term, transition))

    def _expire(self) -> None:
        now = self._monotonic()
        for shard, held in list(self._held.items()):
            if held.valid_until <= now and not held.shedding:
                self._lose(shard, "expired")

    def _lose(self, shard: int, reason: LossReason) -> None:
        held = self._held.pop(shard)
        self._gone(Lost(shard, held.term, reason))

    def _shed_extras(self) -> None:
        keeping = [s for s, held in self._held.items() if not held.shedding]
        extras = balance.to_shed(self.identity, keeping, self.aim)
        self._over = self._over + 1 if extras else 0
        if self._over < 2:
            return
        for shard in extras:
            self._held[shard].shedding = True
            task = asyncio.create_task(self._release(shard, "shed"))
            self._shedding.add(task)
            task.add_done_callback(self._shedding.discard)

    async def _release(self, shard: int, reason: ReleaseReason) -> None:
        held = self._held.get(shard)
        if held is None:
            return
        held.shedding = True  # no new writes; the pass in flight ends first
        async with self.lock(shard):
            if self._held.get(shard) is not held:
                return
            try:
                await self._calls.within(
                    self.timing.call, self.backend.release(shard, self.identity)
                )
            except Exception as error:
                # It expires on its own; the next owner waits out the lease.
                self._failed("release", shard, error)
            self._held.pop(shard, None)
        self._gone(Released(shard, held.term, reason))

    def _gone(self, event: Lost | Released) -> None:
        """A shard no longer held: logged (a loss as a warning), told to the tests and
        emitted to the writer."""
        lost = isinstance(event, Lost)
        verb = "lost" if lost else "released"
        logger.log(
            logging.WARNING if lost else logging.INFO,
            "shard %d %s (%s)",
            event.shard,
            verb,
            event.reason,
            extra={"action": f"shard-{verb}", "shard": event.shard, "identity": self.identity},
        )
        signal = self.test_signals.lost if lost else self.test_signals.released
        signal.signal((event.shard, event.reason))
        self._emit(event)

    def _failed(self, operation: str, shard: int | None, error: Exception) -> None:
        outage = isinstance(error, TimeoutError | OSError) or _is_outage(error)
        logger.warning(
            "coordination %s%s failed: %s",
            operation,
            "" if shard is None else f" of shard {shard}",
            _describe(error),
            extra={"action": "coordination-error", "shard": shard, "identity": self.identity},
        )
        self._emit(Failed(operation, shard, outage))

    def _emit(self, event: Event) -> None:
        for listener in self._listeners:
            listener(event)


def _is_outage(error: Exception) -> bool:
    # Backends raise their client's errors; an HTTP 5xx or 429 is the API server's outage.
    status = getattr(error, "status", None)
    return isinstance(status, int) and (status >= 500 or status == 429)


def _describe(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
