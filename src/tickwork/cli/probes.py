"""``tickwork scheduler --health-port``: ``/healthz`` (alive), ``/readyz`` (its last
coordination round went through, with the shards it owns and those whose database is
failing) and ``/metrics`` (Prometheus), for the kubelet and for scraping."""

from __future__ import annotations

import time
from typing import Any

from tickwork.coordination.coordinator import Coordinator
from tickwork.coordination.health import HealthServer, Readiness
from tickwork.engine import metrics
from tickwork.engine.scheduler import Scheduler


class Probes:
    def __init__(self, scheduler: Scheduler, coordinator: Coordinator, host: str, port: int):
        self.scheduler = scheduler
        self.coordinator = coordinator
        self.server = HealthServer(
            self._readiness,
            host,
            port,
            metrics=self._metrics,
            metrics_content_type=metrics.CONTENT_TYPE,
        )

    @property
    def url(self) -> str:
        return self.server.url

    async def start(self) -> str:
        return await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    def state(self) -> dict[str, Any]:
        coordinator = self.coordinator
        return {
            "identity": coordinator.identity,
            "owned": sorted(coordinator.owned()),
            "members": len(coordinator.members),
            "aim": coordinator.aim,
            # Shards whose database is down or hanging: their passes fail, or their
            # lease cannot be read (nobody can own them until it answers again).
            "down": sorted({*self.scheduler.failing(), *coordinator.unreachable}),
        }

    async def _readiness(self) -> Readiness:
        seen = self.coordinator.last_observed
        lease = self.coordinator.timing.lease_seconds
        if seen is None or time.monotonic() - seen > lease:
            body = {"status": "unavailable", "detail": "no coordination round went through"}
            return False, {**body, **self.state()}
        return True, {"status": "ready", **self.state()}

    def _metrics(self) -> bytes:
        registry = self.scheduler.metrics
        return registry.render() if registry is not None else b""
