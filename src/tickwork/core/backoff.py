"""Retry delays: exponential backoff with full jitter.

Before retry ``n`` (1 for the first retry) the delay is
``uniform(0, min(maxSeconds, baseSeconds * 2**(n-1)))``. Full jitter spreads a burst of
failures (a downstream outage) over the whole window instead of retrying in lockstep.
"""

from __future__ import annotations

import random
from datetime import timedelta

_rng = random.Random()


def ceiling(retry_number: int, base_seconds: float, max_seconds: float) -> float:
    """The upper bound of the delay before retry ``retry_number``."""
    if retry_number < 1:
        raise ValueError("retry_number starts at 1")
    # Cap the exponent: 2**1000 overflows a float long before max_seconds matters.
    exponent = min(retry_number - 1, 64)
    return min(max_seconds, base_seconds * (2.0**exponent))


def delay(
    retry_number: int,
    base_seconds: float,
    max_seconds: float,
    rng: random.Random | None = None,
) -> timedelta:
    """The delay before retry ``retry_number``, drawn uniformly from ``[0, ceiling]``."""
    upper = ceiling(retry_number, base_seconds, max_seconds)
    draw = (rng or _rng).uniform(0.0, upper)
    return timedelta(seconds=draw)


class Backoff:
    """The consecutive failures of one call and the delay before trying it again.

    Loops that repeat a call through an outage (the worker SDK's lease, heartbeat and
    completion calls; the listener that wakes long-polls) follow the rule of a run's
    retries, with the failures so far as the retry number: before the ``n``-th try
    again the delay is ``uniform(0, min(max_seconds, base_seconds * 2**(n-1)))``. Full
    jitter matters here most: a restarted API must not see every worker come back in
    the same instant.
    """

    def __init__(
        self, base_seconds: float, max_seconds: float, rng: random.Random | None = None
    ) -> None:
        self.base_seconds = base_seconds
        self.max_seconds = max_seconds
        self.failures = 0
        self._rng = rng or _rng

    def next_delay(self) -> float:
        """Count one more failure; the seconds to wait before the next try."""
        self.failures += 1
        return delay(self.failures, self.base_seconds, self.max_seconds, self._rng).total_seconds()

    def reset(self) -> None:
        """The call went through: the next failure starts from the base again."""
        self.failures = 0
