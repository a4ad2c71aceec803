"""Retry delays: exponential backoff with full jitter.

Before retry ``n`` (1 for the first retry) the delay is
``uniform(0, min(maxSeconds, baseSeconds * 2**(n-1)))``. Full jitter spreads a burst of
failures (a downstream outage) over the whole window instead of retrying in lockstep.
"""

from __future__ import annotations

import random
from datetime import timedelta


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


_rng = random.Random()
