"""Prometheus metrics. One ``Metrics`` object per process holds its own registry (no
global state for tests to reset); names match states and log actions."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Start lag targets: critical within 1 s, bulk within 60 s; buckets resolve both.
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.leases = Counter(
            "tickwork_leases",
            "Runs leased to workers.",
            ["queue", "priority"],
            registry=self.registry,
        )
        self.start_lag = Histogram(
            "tickwork_start_lag_seconds",
            "Lease time minus ready time of first leases, per priority.",
            ["priority"],
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        )
        self.completions = Counter(
            "tickwork_completions",
            "Completions recorded, by the state they produced.",
            ["state"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "tickwork_refusals",
            "Heartbeats and completions refused, by problem type.",
            ["problem"],
            registry=self.registry,
        )
        self.enqueued = Counter(
            "tickwork_runs_enqueued",
            "Runs enqueued through the API (idempotent repeats excluded).",
            registry=self.registry,
        )
        self.scheduler_rows = Counter(
            "tickwork_scheduler_rows",
            "Rows changed by the scheduler loops, by step.",
            ["step"],
            registry=self.registry,
        )
        self.scheduler_errors = Counter(
            "tickwork_scheduler_errors",
            "Scheduler passes over a shard that failed: outage (database restarting, link "
            "reset or hung) or error (anything else).",
            ["kind"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
