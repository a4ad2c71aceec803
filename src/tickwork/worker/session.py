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
from tickwork.worker.results import OnResult, report
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


class Session:
    def __init__(
        self,
        settings: WorkerSettings,
        handlers: Handlers,
        client: WorkerClient,
        loop: asyncio.AbstractEventLoop,
        threads: HandlerThreads,
        on_result: OnResult | None,
        signals: WorkerSignals,
        rng: random.Random,
    ) -> None:
        self.settings = settings
        self.handlers = handlers
        self.client = client
        self.loop = loop
        self.threads = threads
        self.on_result = on_result
        self.signals = signals
        self.rng = rng
        self.stopping = asyncio.Event()  # stop leasing, drain
        self.aborting = asyncio.Event()  # stop now: cancel everything
        self.slot_freed = asyncio.Event()
        self.beat_wakeup = asyncio.Event()
        self.complete_wakeup = asyncio.Event()
        self.completions_idle = asyncio.Event()
        self.completions_idle.set()
        # Tasks running handlers: one per run, or one per leased batch of plain
        # functions (see execution); ``running`` counts the runs whose handler runs.
        self.tasks: set[asyncio.Task[None]] = set()
        self.running = 0
        self.held: dict[str, Held] = {}  # every run whose lease is held, by run id
        self.pending: list[Held] = []  # finished runs whose completion is not sent yet
        self.lease_call: asyncio.Task[list[Lease]] | None = None
        self.stopped_at: float | None = None  # loop time of the first stop()

    @property
    def free_slots(self) -> int:
        return self.settings.concurrency - self.running

    def report(
        self,
        held: Held,
        completion: Completion | None,
        *,
        dropped: bool = False,
        state: str | None = None,
        problem: Problem | None = None,
    ) -> None:
        report(
            self.on_result, held.context, completion, dropped=dropped, state=state, problem=problem
        )

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
