"""What a handler gets: one leased run, and the signals the worker updates while it runs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwork.core import limits
from tickwork.worker.client import Lease


class NonRetryableError(Exception):
    """Raise from a handler to fail the run with ``retryable: false``.

    The run goes straight to the dead-letter queue, whatever attempts it has left: use
    it for failures that no retry can fix (a malformed payload, a deleted customer).
    Any other exception fails the run as retryable.
    """


class Snooze(Exception):
    """Raise (or return) from a handler to put the run back for ``seconds``.

    The run is leased again once ``seconds`` have passed, without using an attempt
    (the next lease carries the same ``attempt``) and without a DLQ entry: for a
    handler that finds it cannot work yet (a resource not ready, a quota used up). A
    run snoozes at most 1000 times; past that a snooze counts as a failed attempt.
    """

    def __init__(self, seconds: float) -> None:
        if not 0 <= seconds <= limits.MAX_SNOOZE_SECONDS:
            raise ValueError(f"a snooze lasts 0..{limits.MAX_SNOOZE_SECONDS} seconds")
        super().__init__(f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)


class InvalidPayload(NonRetryableError):
    """The payload does not validate as the type of the handler's payload parameter.

    Raised by the worker before the handler is called; the run fails as not retryable,
    the message naming each field that did not validate (``payload.lines[0].amount:
    Input should be a valid number``). ``field`` is the first of them, ``errors`` all
    of them shown (up to 10) as ``(field, message)`` pairs.
    """

    def __init__(
        self, message: str, *, field: str = "payload", errors: Sequence[tuple[str, str]] = ()
    ) -> None:
        super().__init__(message)
        self.field = field
        self.errors = list(errors)


class RunContext:
    """One leased run, handed to its handler.

    The identity fields never change. ``lease_expires_at`` and ``cancel_requested``
    follow the heartbeat answers. ``cancelled`` is set when the run was cancelled
    through the API or when this worker lost its lease (``lost``): a handler that sees
    it should stop early. Stopping is cooperative; the worker never kills a handler.

    Pass ``fencing_token`` to every shared resource the handler writes (a storage
    that rejects a writer with an older token than the last one it saw), and use
    ``idempotency_key`` to make side effects happen once across attempts: execution is
    at-least-once.

    ``dry_run`` is true for the runs of a job in dry-run mode (``spec.dryRun``, for
    shadowing an old cron before switching over): the handler must have no effects.
    """

    __slots__ = (
        "_cancelled",
        "attempt",
        "cancel_requested",
        "deadline",
        "dry_run",
        "due_at",
        "fencing_token",
        "idempotency_key",
        "job",
        "lease_expires_at",
        "lost",
        "payload",
        "priority",
        "queue",
        "run_id",
        "tenant",
        "worker_id",
    )

    def __init__(self, lease: Lease, worker_id: str) -> None:
        self.run_id: str = lease.run_id
        self.job: str = lease.job
        self.tenant: str = lease.tenant
        self.queue: str = lease.queue
        self.priority: str = lease.priority
        self.attempt: int = lease.attempt
        """1 for the first attempt; counts every attempt, including this one."""
        self.idempotency_key: str = lease.idempotency_key
        """Stable across attempts and replays of the run."""
        self.fencing_token: int = lease.fencing_token
        """Strictly increasing per run: a newer lease of the same run has a larger one."""
        self.payload: Any = lease.payload
        self.dry_run: bool = lease.dry_run
        """The job runs in dry-run mode (``spec.dryRun``): log what the run would do and
        have no effects. Only handlers registered with ``dry_run=True`` see such runs."""
        self.due_at: datetime | None = lease.due_at
        self.deadline: datetime | None = lease.deadline
        """Heartbeats do not extend the lease past this instant (the job's timeout)."""
        self.lease_expires_at: datetime | None = lease.lease_expires_at
        self.cancel_requested: bool = False
        """The run was cancelled through the API while leased."""
        self.lost: bool = False
        """The lease is gone (expired and reaped, or re-leased): the outcome is dropped."""
        self.worker_id: str = worker_id
        self._cancelled = asyncio.Event()

    @property
    def cancelled(self) -> asyncio.Event:
        """Set when ``cancel_requested`` or ``lost`` becomes true (await it in a handler)."""
        return self._cancelled

    def __repr__(self) -> str:
        return (
            f"RunContext(run_id={self.run_id!r}, job={self.job!r}, tenant={self.tenant!r}, "
            f"attempt={self.attempt}, fencing_token={self.fencing_token})"
        )

    # Called by the worker on its event loop.

    def _request_cancel(self) -> None:
        self.cancel_requested = True
        self._cancelled.set()

    def _lose(self) -> None:
        self.lost = True
        self._cancelled.set()
