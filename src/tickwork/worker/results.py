"""What became of each leased run, for the caller's ``on_result``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, Literal

from tickwork.core.hot import hot_record
from tickwork.worker.client import Completion, Problem
from tickwork.worker.context import RunContext

log: Final = logging.getLogger("tickwork.worker")


@hot_record
class RunResult:
    """What became of one leased run, reported to ``on_result``.

    ``outcome`` is what the handler did (``snoozed``: it raised or returned ``Snooze``;
    ``dropped``: the lease was lost, so nothing was reported); ``state`` is the API's
    answer to the completion (``succeeded``, ``retry_wait``, ``dead``, ``cancelled``),
    or None with ``problem`` set when the completion was refused or could not be
    delivered.
    """

    run_id: str
    job: str
    attempt: int
    outcome: Literal["succeeded", "failed", "snoozed", "dropped"]
    message: str | None = None
    retryable: bool = True
    state: str | None = None
    problem: Problem | None = None


OnResult = Callable[[RunResult], object]


def report(
    on_result: OnResult | None,
    context: RunContext,
    completion: Completion | None,
    *,
    dropped: bool = False,
    state: str | None = None,
    problem: Problem | None = None,
) -> None:
    """Log a dropped outcome, and hand the run's result to ``on_result`` (whose own
    failure is logged, never raised into the worker)."""
    if dropped:
        reason = "lease lost" if context.lost else "handler did not return"
        log.warning(
            "run %s: %s, outcome dropped",
            context.run_id,
            reason,
            extra={"action": "dropped", "run_id": context.run_id},
        )
    if on_result is None:
        return
    result = RunResult(
        run_id=context.run_id,
        job=context.job,
        attempt=context.attempt,
        outcome="dropped" if dropped or completion is None else completion.outcome,
        message=None if completion is None else completion.message,
        retryable=True if completion is None else completion.retryable,
        state=state,
        problem=problem,
    )
    try:
        on_result(result)
    except Exception:
        log.exception("on_result failed", extra={"action": "on-result-failed"})
