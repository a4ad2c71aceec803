"""What a failed attempt leads to: another try after a backoff, or the end of the run.

Pure: the attempt's numbers in, the decision out. The store applies it (a worker's
failed completion, or a lease the reaper takes back), so both paths decide alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tickwork.core import backoff
from tickwork.core.records import State


@dataclass(frozen=True, slots=True)
class Decision:
    """The state a failed attempt moves its run to, and the delay before the next
    attempt (``retry_wait`` only)."""

    state: State
    delay_seconds: float = 0.0


def decide(
    *,
    attempt: int,
    max_attempts: int,
    retry_base: float,
    retry_max: float,
    retryable: bool,
    cancel_requested: bool,
    rng: random.Random | None = None,
) -> Decision:
    """After failed attempt ``attempt`` (1-based): ``cancelled`` when a cancel was asked
    while it ran, ``retry_wait`` with a full-jitter delay while attempts are left and
    the failure is retryable, else ``dead``."""
    if cancel_requested:
        return Decision(State.cancelled)
    if retryable and attempt < max_attempts:
        delay = backoff.delay(attempt, retry_base, retry_max, rng)
        return Decision(State.retry_wait, delay.total_seconds())
    return Decision(State.dead)
