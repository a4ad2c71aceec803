"""Queue-wide rate limits set on the dispatcher (``--queue-rate-limit reports=100/60``):
at most ``limit`` runs of a queue leased in any ``period_seconds`` seconds, across all
tenants and dispatcher replicas (docs/flow-control.md). This module reads and checks
the option; ``engine.queue_windows`` applies it."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic_core import PydanticCustomError

from tickwork.core import limits
from tickwork.core.spec import check_queue


@dataclass(frozen=True, slots=True)
class QueueRateLimit:
    queue: str
    limit: int
    period_seconds: float

    def __str__(self) -> str:
        return f"{self.queue}={self.limit}/{self.period_seconds:g}"


def parse(text: str) -> QueueRateLimit:
    """``"reports=100/60"``: 100 runs of queue ``reports`` in any 60 seconds."""
    queue, sep, rate = text.strip().partition("=")
    count, slash, period = rate.partition("/")
    if not sep or not slash:
        raise ValueError(f"{text!r} is not QUEUE=LIMIT/SECONDS (as reports=100/60)")
    try:
        check_queue(queue)
    except PydanticCustomError as error:
        raise ValueError(f"{text!r}: {error.message()}") from error
    try:
        limit, seconds = int(count), float(period)
    except ValueError as error:
        raise ValueError(f"{text!r}: LIMIT is a whole number and SECONDS a number") from error
    if not 1 <= limit <= limits.MAX_RATE_LIMIT:
        raise ValueError(f"{text!r}: the limit must be 1 to {limits.MAX_RATE_LIMIT}")
    if not (math.isfinite(seconds) and 1 <= seconds <= limits.MAX_RATE_PERIOD_SECONDS):
        raise ValueError(f"{text!r}: the period must be 1 to {limits.MAX_RATE_PERIOD_SECONDS} s")
    return QueueRateLimit(queue, limit, seconds)


def parse_all(texts: Iterable[str]) -> dict[str, QueueRateLimit]:
    """Each text's limit by queue; a queue given twice is refused (which one meant?)."""
    found: dict[str, QueueRateLimit] = {}
    for text in texts:
        for part in text.split():
            rule = parse(part)
            if rule.queue in found:
                raise ValueError(f"queue {rule.queue!r} is given two rate limits")
            found[rule.queue] = rule
    return found
