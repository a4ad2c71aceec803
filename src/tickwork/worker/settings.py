"""The settings of a worker: what ``Worker(url, token, **settings)`` and
``Worker.from_env(**settings)`` take, one documented field each (the table in
``docs/workers.md`` is generated from this model)."""

from __future__ import annotations

import os
import socket
from typing import Annotated, Any

from pydantic import Field, field_validator

from tickwork.core import limits
from tickwork.core.settings import Settings


def default_worker_id() -> str:
    """``<hostname>-<pid>``: unique per process, readable in run attempts."""
    return f"{socket.gethostname()}-{os.getpid()}"


class WorkerSettings(Settings):
    """How a worker leases, runs, heartbeats, completes and drains."""

    queues: tuple[str, ...] = ("default",)
    """Queues to lease from; the token must allow them."""

    concurrency: Annotated[int, Field(ge=1)] = 10
    """Handlers running at once (and runs held)."""

    lease_seconds: Annotated[
        float, Field(ge=limits.MIN_LEASE_SECONDS, le=limits.MAX_LEASE_SECONDS)
    ] = float(limits.DEFAULT_LEASE_SECONDS)
    """The lease asked for; heartbeats come at a third of it."""

    wait_seconds: Annotated[float, Field(ge=0, le=limits.MAX_WAIT_SECONDS)] = 10.0
    """Long-poll of each lease call."""

    worker_id: Annotated[str, Field(min_length=1, max_length=limits.MAX_WORKER_ID_LENGTH)] = Field(
        default_factory=default_worker_id, json_schema_extra={"shown": "<hostname>-<pid>"}
    )
    """Recorded with each attempt; ``<hostname>-<pid>`` when not given."""

    drain_timeout: Annotated[float, Field(ge=0)] = 20.0
    """After ``stop()``, how long running handlers may take before they are cancelled
    (their runs are then failed as retryable). Completions get 5 s more, so keep it
    under the pod's termination grace period minus 5 s."""

    complete_window: Annotated[float, Field(ge=0)] = 0.005
    """How long a finished run waits for others to share its completion call."""

    lease_window: Annotated[float, Field(ge=0)] = 0.005
    """With fewer handler slots free than a full lease batch, how long the next lease
    call waits for more to free up (handlers that finish together free their slots
    moments apart: one call then asks for all of them, not one for the first few)."""

    retry_base_seconds: Annotated[float, Field(ge=0)] = 0.5
    """While the API is unreachable, calls are retried after a full-jitter backoff
    from this..."""

    retry_max_seconds: Annotated[float, Field(ge=0)] = 30.0
    """...doubling up to this."""

    request_timeout: Annotated[float, Field(gt=0)] = 30.0
    """Bound of each HTTP call (a lease call gets ``wait_seconds`` more)."""

    @field_validator("queues", mode="before")
    @classmethod
    def _queue_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if not value:
            raise ValueError("give at least one queue to lease from")
        return value

    @field_validator("worker_id", mode="before")
    @classmethod
    def _default_id(cls, value: Any) -> Any:
        return default_worker_id() if value is None else value
