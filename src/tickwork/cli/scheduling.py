"""The scheduler role, built one way for ``tickwork scheduler``, ``tickwork dev`` and
the tests that run it whole.

A scheduler is its settings (``SchedulerSettings``, the model of ``tickwork
scheduler``'s options) plus what the process gives it: whose shards, where metrics go.
``scheduler_role`` builds it with the shard observer (backlog gauges, the canary) and
hands back the loops a process runs for it (the passes over owned shards, and the
delivery of notifications), so ``tickwork dev`` runs the scheduler production runs,
not a smaller one. kopf's ``operator(registry=, settings=, stop_flag=)`` is the model:
one entry point, configured by one object.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tickwork.cli import webhooks
from tickwork.coordination.ownership import Ownership
from tickwork.core.settings import SchedulerSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.engine.observer import ShardObserver
from tickwork.engine.scheduler import Scheduler

Loop = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class SchedulerRole:
    """A built scheduler (for its probes) and the loops that run it."""

    scheduler: Scheduler
    loops: tuple[Loop, ...]


def build(
    engine: Installation, settings: SchedulerSettings, *, ownership: Ownership, metrics: Metrics
) -> Scheduler:
    """The scheduler ``settings`` describe, over ``engine``'s shards."""
    observer = ShardObserver(metrics, interval=timedelta(seconds=settings.observe_interval))
    return Scheduler(
        engine.database, settings, ownership=ownership, metrics=metrics, observer=observer
    )


@contextlib.asynccontextmanager
async def scheduler_role(
    engine: Installation, settings: SchedulerSettings, *, ownership: Ownership, metrics: Metrics
) -> AsyncIterator[SchedulerRole]:
    """The scheduler and its loops, for as long as the block runs."""
    scheduler = build(engine, settings, ownership=ownership, metrics=metrics)
    async with webhooks.delivery_loop(engine.dispatcher) as deliveries:
        yield SchedulerRole(scheduler, (scheduler.run, deliveries))
