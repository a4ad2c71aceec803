"""The Events the operator posts on ScheduledJobs, and their rate limit.

``Normal Scheduled`` (a spec stored), ``Warning InvalidSpec``, ``Warning RunDead`` (a
run reached the dead-letter queue), ``Warning AutoPaused`` (``spec.pauseAfterFailures``
paused the job) and ``Normal MissedRunsCaughtUp``. Events are
posted in the background from a bounded queue: a slow or failing API server delays
no handler and no status write, and an Event that cannot be posted is logged and
dropped (Events are best effort, as in every controller).

``DeadRunNotices`` keeps a dead-run storm from flooding the API: at most one RunDead
Event per job per minute, its message counting the runs that died since the last one.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from tickwork.operator import status
from tickwork.operator.objects import Key

logger = logging.getLogger("tickwork.operator.events")

COMPONENT: Final = "tickwork-operator"
RUN_DEAD_WINDOW: Final = 60.0
QUEUE_LIMIT: Final = 10_000


class Reason(enum.StrEnum):
    scheduled = "Scheduled"
    invalid_spec = "InvalidSpec"
    run_dead = "RunDead"
    missed_runs_caught_up = "MissedRunsCaughtUp"
    auto_paused = "AutoPaused"


WARNINGS: Final = frozenset({Reason.invalid_spec, Reason.run_dead, Reason.auto_paused})


class Poster(Protocol):
    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class Event:
    reference: Mapping[str, str]  # the involvedObject
    reason: Reason
    message: str
    at: datetime

    @property
    def type(self) -> str:
        return "Warning" if self.reason in WARNINGS else "Normal"

    def body(self, instance: str) -> dict[str, Any]:
        """A core/v1 Event, as ``kubectl describe`` and ``kubectl get events`` show it."""
        when = status.timestamp(self.at)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{self.reference['name']}.",
                "namespace": self.reference["namespace"],
            },
            "involvedObject": dict(self.reference),
            "reason": self.reason.value,
            "message": self.message[:1024],
            "type": self.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": instance,
            "firstTimestamp": when,
            "lastTimestamp": when,
            "count": 1,
        }


class EventRecorder:
    def __init__(
        self,
        poster: Poster,
        *,
        instance: str,
        clock: Callable[[], datetime] | None = None,
        queue_limit: int = QUEUE_LIMIT,
    ) -> None:
        self.poster = poster
        self.instance = instance
        self.clock = clock or (lambda: datetime.now(UTC))
        self._queue: asyncio.Queue[Event] = asyncio.Queue(queue_limit)
        self.posted = 0
        self.dropped = 0

    def record(self, reference: Mapping[str, str], reason: Reason, message: str) -> None:
        event = Event(dict(reference), reason, message, self.clock())
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            logger.warning(
                "event dropped (queue full): %s %s/%s",
                reason.value,
                reference.get("namespace"),
                reference.get("name"),
                extra={"action": "event-dropped"},
            )

    async def run(self, stop: asyncio.Event, flush_seconds: float = 5.0) -> None:
        """Post queued Events until ``stop``; then the ones still queued, for at most
        ``flush_seconds`` (an API server that does not answer must not hold a shutdown)."""
        stopping = asyncio.create_task(stop.wait())
        # Cancelled from outside (a lost term) while waiting: its get() must not be left
        # pending on the queue.
        taking: asyncio.Task[Event] | None = None
        try:
            while not stop.is_set():
                taking = asyncio.create_task(self._queue.get())
                done, _ = await asyncio.wait(
                    {taking, stopping}, return_when=asyncio.FIRST_COMPLETED
                )
                if taking not in done:
                    taking.cancel()
                    break
                await self._post(taking.result())
            try:
                async with asyncio.timeout(flush_seconds):
                    while not self._queue.empty():
                        await self._post(self._queue.get_nowait())
            except TimeoutError:
                self.dropped += self._queue.qsize()
                logger.warning(
                    "%d event(s) not posted at shutdown",
                    self._queue.qsize(),
                    extra={"action": "event-dropped"},
                )
        finally:
            stopping.cancel()
            if taking is not None:
                taking.cancel()

    async def _post(self, event: Event) -> None:
        try:
            await self.poster.create_event(event.reference["namespace"], event.body(self.instance))
        except Exception as error:  # best effort: an Event is never worth a crash
            self.dropped += 1
            logger.warning(
                "cannot post %s event on %s/%s: %s",
                event.reason.value,
                event.reference.get("namespace"),
                event.reference.get("name"),
                error,
                extra={"action": "event-error"},
            )
        else:
            self.posted += 1


class DeadRunNotices:
    """At most one RunDead Event per job per ``window`` seconds; runs that die in
    between are counted into the next one."""

    def __init__(
        self, window: float = RUN_DEAD_WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window = window
        self.clock = clock
        self._last: dict[Key, float] = {}
        self._pending: dict[Key, int] = {}

    def add(self, key: Key, died: int) -> int | None:
        """``died`` more runs of ``key`` are dead: how many to announce now (None: wait)."""
        if died <= 0:
            return None
        total = self._pending.pop(key, 0) + died
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.window:
            self._pending[key] = total
            return None
        self._last[key] = now
        return total

    def due(self) -> list[tuple[Key, int]]:
        """The held-back counts whose window has passed (announce them now)."""
        now = self.clock()
        ready = [k for k in self._pending if now - self._last.get(k, now) >= self.window]
        announced = []
        for key in ready:
            announced.append((key, self._pending.pop(key)))
            self._last[key] = now
        # Forget jobs quiet for a whole window: the map stays as small as the storm.
        for key in [k for k, at in self._last.items() if now - at >= self.window]:
            if key not in self._pending:
                del self._last[key]
        return announced


def run_dead_message(count: int, dead_runs: int) -> str:
    runs = "1 run" if count == 1 else f"{count} runs"
    return (
        f"{runs} reached the dead-letter queue ({dead_runs} dead in all): "
        "inspect with `tickwork dlq list`, then replay or discard"
    )
