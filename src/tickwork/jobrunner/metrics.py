"""The job-runner's series, on its health port's ``/metrics``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

# What became of a run or Job, known in advance: exported at zero from the start.
EVENTS: Final = (
    "created",
    "adopted",
    "deleted",
    "fenced",
    "succeeded",
    "retry_wait",
    "dead",
    "cancelled",
)


class RunnerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs = Counter(
            "tickwork_job_runner_jobs",
            "What became of the runs and Jobs this runner held: created, adopted (taken up "
            "at start), deleted, fenced (lease lost), and the state each completion ended "
            "in (succeeded, retry_wait, dead, cancelled)",
            ["event"],
            registry=self.registry,
        )
        for event in EVENTS:
            self.jobs.labels(event)
        self.api_errors = Counter(
            "tickwork_job_runner_api_errors",
            "Calls to the tickwork API that failed and were tried again",
            ["api"],
            registry=self.registry,
        )
        self.api_errors.labels("tickwork")
        self.held = Gauge(
            "tickwork_job_runner_held_runs",
            "Runs whose lease this runner holds now",
            registry=self.registry,
        )
        self.ready = Gauge(
            "tickwork_job_runner_ready",
            "1 when its caches are synced and its last lease call went through",
            registry=self.registry,
        )

    def track(self, held: Callable[[], int], ready: Callable[[], bool]) -> None:
        """Read the gauges from the runner at each scrape."""
        self.held.set_function(lambda: float(held()))
        self.ready.set_function(lambda: float(ready()))

    def render(self) -> bytes:
        return generate_latest(self.registry)
