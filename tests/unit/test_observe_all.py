"""``engine.metrics.observe_all``: a batch of values observed in one histogram series
reads exactly as the same values observed one by one."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from tickwork.engine.metrics import observe_all

BUCKETS = (0.1, 0.5, 1.0, 5.0)
# On a bound, between bounds, under the first, past the last (the +Inf bucket), zero.
VALUES = [0.1, 0.3, 0.5, 0.05, 7.5, 0.0, 1.0, 4.99, 5.0, 5.01, 0.3]


def exposition(values: list[float], *, batched: bool) -> str:
    """The series as Prometheus reads it, without the time it was made at."""
    registry = CollectorRegistry()
    histogram = Histogram("lag_seconds", "lag", ["priority"], buckets=BUCKETS, registry=registry)
    series = histogram.labels("critical")
    if batched:
        observe_all(series, values)
    else:
        for value in values:
            series.observe(value)
    lines = generate_latest(registry).decode().splitlines()
    return "\n".join(line for line in lines if "_created" not in line)


@pytest.mark.parametrize("values", [VALUES, [], [2.0], [100.0] * 3])
def test_a_batch_reads_as_the_values_observed_one_by_one(values: list[float]) -> None:
    assert exposition(values, batched=True) == exposition(values, batched=False)


def test_a_batch_lands_in_its_buckets() -> None:
    text = exposition(VALUES, batched=True)
    assert 'lag_seconds_bucket{le="0.1",priority="critical"} 3.0' in text
    assert 'lag_seconds_bucket{le="5.0",priority="critical"} 9.0' in text
    assert 'lag_seconds_count{priority="critical"} 11.0' in text
