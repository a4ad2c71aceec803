"""Prometheus metrics. One ``Metrics`` object per process holds its own registry (no
global state for tests to reset); names match states and log actions."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Start lag targets: critical within 1 s, bulk within 60 s; buckets resolve both.
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# From a shard's lease acquired to its first full pass (epoch taken, reaped, caught up).
_TAKEOVER_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


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
        self.shards_owned = Gauge(
            "tickwork_scheduler_shards_owned",
            "Shards this scheduler replica owns now (may write to).",
            registry=self.registry,
        )
        self.scheduler_members = Gauge(
            "tickwork_scheduler_members",
            "Live scheduler replicas this replica saw in its last coordination round.",
            registry=self.registry,
        )
        self.shard_acquisitions = Counter(
            "tickwork_shard_lease_acquisitions",
            "Shard leases this replica took.",
            registry=self.registry,
        )
        self.shard_transitions = Counter(
            "tickwork_shard_lease_transitions",
            "Shard leases this replica took over from another holder (leaseTransitions).",
            registry=self.registry,
        )
        self.shard_losses = Counter(
            "tickwork_shard_lease_losses",
            "Shards this replica stopped owning without giving them up: expired (not "
            "renewed in time), taken (another holder), deposed (its epoch was taken).",
            ["reason"],
            registry=self.registry,
        )
        self.shard_releases = Counter(
            "tickwork_shard_lease_releases",
            "Shard leases this replica gave up: shed (rebalancing) or shutdown.",
            ["reason"],
            registry=self.registry,
        )
        self.coordination_errors = Counter(
            "tickwork_coordination_errors",
            "Coordination calls that failed or did not answer in time, by operation.",
            ["operation"],
            registry=self.registry,
        )
        self.takeover = Histogram(
            "tickwork_scheduler_takeover_seconds",
            "From a shard's lease acquired to its first full pass (epoch taken, expired "
            "leases reaped, missed runs caught up).",
            buckets=_TAKEOVER_BUCKETS,
            registry=self.registry,
        )
        self.epoch_conflicts = Counter(
            "tickwork_scheduler_epoch_conflicts",
            "Scheduler transactions refused because the shard's epoch had moved on (the "
            "replica was deposed), by step.",
            ["step"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
