"""Prometheus metrics. One ``Metrics`` object per process holds its own registry (no
global state for tests to reset); names match states and log actions. docs/operations.md
lists every metric; their names and labels are stable.

Per-job series (label ``tickwork_job``, not ``job``: Prometheus keeps ``job`` for the
scrape target) exist only for the jobs the operator opts in (``--metrics-job``
patterns), at most ``JobLabels.limit`` of them; every other job counts under
``_other``, so a tenant creating thousands of jobs cannot blow up the series count.
"""

from __future__ import annotations

import bisect
import contextlib
import fnmatch
from collections.abc import Iterable, Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Start lag targets: critical within 1 s, bulk within 60 s; buckets resolve both.
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# From a shard's lease acquired to its first full pass (epoch taken, reaped, caught up).
_TAKEOVER_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# HTTP answers: a hot worker call takes about a millisecond; a lease long-poll waits up
# to its waitSeconds (at most 30 s) when no run is ready.
_HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


OTHER_JOBS = "_other"
_PRIORITIES = ("critical", "default", "bulk")


def register_process_collectors(registry: CollectorRegistry) -> None:
    """``process_*`` (CPU, resident memory, open files, start time; Linux only) and
    ``python_info`` on ``registry``: every role's own registry, not the library's
    global one, which no role serves."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)


class JobLabels:
    """The ``tickwork_job`` label of a job: ``tenant/name`` for the jobs that match one
    of ``patterns`` (shell-style, as ``payments/*``), while fewer than ``limit`` have
    been seen; ``_other`` for the rest."""

    def __init__(self, patterns: Iterable[str] = (), limit: int = 200) -> None:
        self.patterns = tuple(patterns)
        self.limit = limit
        self._chosen: set[str] = set()

    def __call__(self, tenant: str, job: str) -> str:
        key = f"{tenant}/{job}"
        if key in self._chosen:
            return key
        if len(self._chosen) < self.limit and any(
            fnmatch.fnmatchcase(key, pattern) for pattern in self.patterns
        ):
            self._chosen.add(key)
            return key
        return OTHER_JOBS


class Metrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, job_labels: JobLabels | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.job_label = job_labels or JobLabels()
        self.schedule_lag = Histogram(
            "tickwork_schedule_lag_seconds",
            "Lease time of a run's first attempt minus its due time, per priority (the "
            "design's schedule lag: start time minus due time).",
            ["priority"],
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        )
        self.job_leases = Counter(
            "tickwork_job_leases",
            "Runs leased, per job (opted-in jobs; the rest under _other) and priority.",
            ["tickwork_job", "priority"],
            registry=self.registry,
        )
        self.lease_expiries = Counter(
            "tickwork_lease_expiries",
            "Leases that expired without a completion (taken back by the reaper), per job "
            "and priority.",
            ["tickwork_job", "priority"],
            registry=self.registry,
        )
        self.dead_runs = Counter(
            "tickwork_dead_runs",
            "Runs that reached the dead-letter queue, per job and priority (counted by the "
            "scheduler that owns the shard, from the shard's history).",
            ["tickwork_job", "priority"],
            registry=self.registry,
        )
        self.auto_paused = Counter(
            "tickwork_jobs_auto_paused",
            "Jobs paused by tickwork after spec.pauseAfterFailures consecutive dead runs, "
            "per job (counted by the scheduler that owns the shard, from its audit log).",
            ["tickwork_job"],
            registry=self.registry,
        )
        self.ready_runs = Gauge(
            "tickwork_ready_runs",
            "Ready runs waiting for a worker, per shard, tenant, queue and priority.",
            ["shard", "tenant", "queue", "priority"],
            registry=self.registry,
        )
        self.oldest_ready = Gauge(
            "tickwork_oldest_ready_seconds",
            "Age of the oldest ready run (now minus its ready time), per shard, tenant, "
            "queue and priority.",
            ["shard", "tenant", "queue", "priority"],
            registry=self.registry,
        )
        self.queue_paused = Gauge(
            "tickwork_queue_paused",
            "1 while the tenant's queue is paused (no run of it is leased), as the shards "
            "this scheduler owns hold it; absent otherwise.",
            ["tenant", "queue"],
            registry=self.registry,
        )
        self.canary_lag = Gauge(
            "tickwork_canary_lag_seconds",
            "Finish time minus due time of the shard's latest succeeded canary run.",
            ["shard"],
            registry=self.registry,
        )
        self.canary_missed = Gauge(
            "tickwork_canary_missed",
            "The shard's latest canary runs, in a row, that did not succeed within a minute "
            "of being due (0: the last one did).",
            ["shard"],
            registry=self.registry,
        )
        self._backlog_series: dict[int, set[tuple[str, str, str, str]]] = {}
        self._paused_series: set[tuple[str, str]] = set()
        self._canary_series: set[int] = set()
        self.canaries = Counter(
            "tickwork_canary_runs",
            "Canary runs the scheduler enqueued, per shard.",
            ["shard"],
            registry=self.registry,
        )
        self.leases = Counter(
            "tickwork_leases",
            "Runs leased to workers, per tenant, queue and priority (queue names are each "
            "tenant's own).",
            ["tenant", "queue", "priority"],
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
        self.shard_up = Gauge(
            "tickwork_shard_up",
            "1 while the shard serves (reachable, at a schema this release runs against, the "
            "shard it should be), else 0: as this process's last readiness check found it.",
            ["shard"],
            registry=self.registry,
        )
        # --- The HTTP API's answers (api/request_metrics.py counts them) ---
        self.http_requests = Counter(
            "tickwork_http_requests",
            "HTTP answers of the API, per method, route template (other: no route) and "
            "status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_duration = Histogram(
            "tickwork_http_request_duration_seconds",
            "From a request's arrival in the app to its answer sent, per method and route "
            "template (a lease long-poll counts its wait).",
            ["method", "route"],
            buckets=_HTTP_BUCKETS,
            registry=self.registry,
        )
        # --- The dispatcher's tokens file, read again when it changes ---
        self.tokens_reloads = Counter(
            "tickwork_tokens_file_reloads",
            "Changes of the tokens file the dispatcher saw, by result: loaded (its tokens "
            "serve now) or failed (it did not load: the tokens read before still serve, "
            "the log says why).",
            ["result"],
            registry=self.registry,
        )
        # --- Overlap policies of scheduled fires (the scheduler's due flip decides them) ---
        self.overlap_runs = Counter(
            "tickwork_overlap_runs",
            "Runs an overlap policy acted on, per job (opted-in jobs; the rest under "
            "_other) and action: skipped (a fire overlapPolicy Forbid skipped while an "
            "earlier run of the job was running) or replaced (a run overlapPolicy Replace "
            "stopped: cancelled, or asked to stop while leased).",
            ["tickwork_job", "action"],
            registry=self.registry,
        )
        for action in ("skipped", "replaced"):
            self.overlap_runs.labels(OTHER_JOBS, action)
        # --- Flow control (docs/flow-control.md) ---
        self.runs_held_back = Gauge(
            "tickwork_runs_held_back",
            "Ready runs of a job that its limit holds back now (their concurrency bucket "
            "full, or their rate window used up), per job (opted-in jobs; the rest under "
            "_other) and limit: concurrency or rate (read by the scheduler that owns the "
            "shard).",
            ["tickwork_job", "limit"],
            registry=self.registry,
        )
        self._held_back_series: dict[int, dict[tuple[str, str], int]] = {}
        self.queue_rate_limited = Counter(
            "tickwork_queue_rate_limited",
            "Claims a queue's rate limit (--queue-rate-limit) cut short: the window "
            "granted fewer runs than the worker asked for, and all were used, per queue.",
            ["queue"],
            registry=self.registry,
        )
        register_process_collectors(self.registry)
        self._initialise_known_series()

    def _initialise_known_series(self) -> None:
        """Export the series whose labels are known in advance at zero from the start.
        A counter series created by its first increment shows up with 1 already, so
        ``increase()`` over it reads 0 and an alert on it misses the first event of
        each process (a first dead run, a first expiry)."""
        for priority in _PRIORITIES:
            self.schedule_lag.labels(priority)
            self.start_lag.labels(priority)
            for counter in (self.job_leases, self.lease_expiries, self.dead_runs):
                counter.labels(OTHER_JOBS, priority)
        self.auto_paused.labels(OTHER_JOBS)
        for step in ("materialised", "promoted", "skipped", "reaped"):
            self.scheduler_rows.labels(step)
        for kind in ("outage", "error"):
            self.scheduler_errors.labels(kind)

    def set_backlog(self, shard: int, backlog: Iterable[tuple[str, str, str, int, float]]) -> None:
        """Replace a shard's backlog gauges with ``(tenant, queue, priority, ready, oldest
        age)`` rows: a queue that emptied loses its series instead of keeping its last
        value."""
        label = str(shard)
        seen = set()
        for tenant, queue, priority, ready, oldest in backlog:
            self.ready_runs.labels(label, tenant, queue, priority).set(ready)
            self.oldest_ready.labels(label, tenant, queue, priority).set(oldest)
            seen.add((label, tenant, queue, priority))
        for gone in self._backlog_series.get(shard, set()) - seen:
            self.ready_runs.remove(*gone)
            self.oldest_ready.remove(*gone)
        self._backlog_series[shard] = seen

    def set_paused_queues(self, paused: set[tuple[str, str]]) -> None:
        """Replace the paused-queue gauges with ``(tenant, queue)`` pairs (every shard
        holds every pause: any shard's copy is the whole set)."""
        for tenant, queue in paused:
            self.queue_paused.labels(tenant, queue).set(1)
        for gone in self._paused_series - paused:
            with contextlib.suppress(KeyError):
                self.queue_paused.remove(*gone)
        self._paused_series = set(paused)

    def set_held_back(self, shard: int, held: Iterable[tuple[str, str, str, int]]) -> None:
        """Replace a shard's part of the held-back gauges with ``(tenant, job, limit,
        runs)`` rows. Jobs of several shards may share a label (``_other``): each
        series is the sum of the shards' parts, and goes when it falls to nothing."""
        part: dict[tuple[str, str], int] = {}
        for tenant, job, limit, runs in held:
            key = (self.job_label(tenant, job), limit)
            part[key] = part.get(key, 0) + runs
        touched = set(part) | set(self._held_back_series.get(shard, {}))
        self._held_back_series[shard] = part
        for key in touched:
            total = sum(parts.get(key, 0) for parts in self._held_back_series.values())
            if total:
                self.runs_held_back.labels(*key).set(total)
            else:
                with contextlib.suppress(KeyError):
                    self.runs_held_back.remove(*key)

    def forget_shard(self, shard: int) -> None:
        """Drop a shard's gauges: another replica owns it now and reports them."""
        self.set_backlog(shard, ())
        self.set_held_back(shard, ())
        self._held_back_series.pop(shard, None)
        if shard in self._canary_series:
            for gauge in (self.canary_lag, self.canary_missed):
                with contextlib.suppress(KeyError):
                    gauge.remove(str(shard))
            self._canary_series.discard(shard)

    def set_canary(self, shard: int, lag: float | None, missed: int) -> None:
        if lag is not None:
            self.canary_lag.labels(str(shard)).set(lag)
        self.canary_missed.labels(str(shard)).set(missed)
        self._canary_series.add(shard)

    def set_shards_up(self, shards: int, down: Iterable[int]) -> None:
        failing = set(down)
        for shard in range(shards):
            self.shard_up.labels(str(shard)).set(0 if shard in failing else 1)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def observe_all(series: Histogram, values: Sequence[float]) -> None:
    """Observe each of ``values`` in one histogram series, as ``series.observe`` of each
    would: one increment of the sum and one per bucket touched, where a lease call's
    batch took a lock per value and bucket (two histograms a run on the lease path).
    A client whose histograms are not built as this expects observes one by one."""
    bounds: Sequence[float] | None = getattr(series, "_upper_bounds", None)
    buckets = getattr(series, "_buckets", None)
    total = getattr(series, "_sum", None)
    if bounds is None or buckets is None or total is None or len(buckets) != len(bounds):
        for value in values:
            series.observe(value)
        return
    counts = [0] * len(bounds)
    for value in values:
        # observe() counts a value in the first bucket whose bound is not below it.
        counts[bisect.bisect_left(bounds, value)] += 1
    total.inc(sum(values))
    for index, count in enumerate(counts):
        if count:
            buckets[index].inc(count)
