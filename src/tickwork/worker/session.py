"""One ``Worker.run()``: the runs the worker holds, the tasks running their handlers,
and the events its loops wake each other with.

The lease loop (``leasing``), the heartbeat loop (``heartbeats``), the completion loop
(``completions``) and the drain (``draining``) share one ``Session``; nothing of it
outlives the run. A run is *held* from its lease until its completion is answered (or
its lease is lost): while held it is heartbeaten, so a slow or briefly unreachable API
does not cost the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import Final

from tickwork.core.backoff import Backoff
from tickwork.core.testsignal import Signals, TestSignal
from tickwork.worker.client import Completed, Completion, Extended, Lease, Problem, WorkerClient
from tickwork.worker.context import RunContext
from tickwork.worker.handlers import Handlers
from tickwork.worker.results import OnResult
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.threads import HandlerThreads

log: Final = logging.getLogger("tickwork.worker")


@dataclass
class WorkerSignals(Signals):
    """What a test can wait on (``worker.test_signals.init()`` before ``run()``)."""

    leased: TestSignal[Lease] = field(default_factory=lambda: TestSignal("leased"))
    """A run was leased and its handler started."""

    extended: TestSignal[Extended] = field(default_factory=lambda: TestSignal("extended"))
    """A heartbeat extended a held run's lease."""

    lease_lost: TestSignal[str] = field(default_factory=lambda: TestSignal("lease_lost"))
    """A held run's lease was found gone (the run id)."""

    completed: TestSignal[Completed | Problem] = field(
        default_factory=lambda: TestSignal("completed")
    )
    """The API answered a run's completion."""


@dataclass(slots=True, eq=False)
class Held:
    """A run this worker holds a lease on, from lease until its completion is answered."""

    context: RunContext
    next_beat: float
    completion: Completion | None = None
    completing: bool = False


@dataclass(eq=False)
class Session:
    """One worker's running state, shared by its leasing, execution, heartbeat and
    completion loops."""

    settings: WorkerSettings
    handlers: Handlers
    client: WorkerClient
    loop: asyncio.AbstractEventLoop
    threads: HandlerThreads
    on_result: OnResult | None
    signals: WorkerSignals
    rng: random.Random
    # stopping: stop leasing, drain; aborting: stop now, cancel everything.
    stopping: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    aborting: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    slot_freed: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    beat_wakeup: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    complete_wakeup: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    completions_idle: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    # Tasks running handlers: one per run, or one per leased batch of plain
    # functions (see execution); ``running`` counts the runs whose handler runs.
    tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    running: int = field(default=0, init=False)
    held: dict[str, Held] = field(default_factory=dict, init=False)  # leases held, by run id
    pending: list[Held] = field(default_factory=list, init=False)  # completions not sent yet
    lease_call: asyncio.Task[list[Lease]] | None = field(default=None, init=False)
    stopped_at: float | None = field(default=None, init=False)  # loop time of first stop()

    def __post_init__(self) -> None:
        self.completions_idle.set()

    @property
    def free_slots(self) -> int:
        return self.settings.concurrency - self.running

    def retry_delay(self, backoff: Backoff, call: str, reason: object) -> float:
        """The backoff before repeating a failed ``call`` (or some of its items), logged."""
        delay = backoff.next_delay()
        log.warning(
            "%s call failed (%s); retry %d in %.2fs",
            call,
            reason,
            backoff.failures,
            delay,
            extra={"action": "api-retry", "call": call, "retry": backoff.failures},
        )
        return delay

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds``, returning early when the worker is asked to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    def check_idle(self) -> None:
        """Mark the completions idle once none waits to be sent or answered."""
        if not self.pending and not any(h.completing for h in self.held.values()):
            self.completions_idle.set()
