"""The tickwork worker SDK: lease runs over HTTP and run Python handlers for them.

```python
from tickwork.worker import NonRetryableError, RunContext, Worker

worker = Worker.from_env(concurrency=20)

@worker.handler(job="export-invoices")
async def export_invoices(ctx: RunContext) -> None:
    await storage.write(ctx.payload, fencing_token=ctx.fencing_token)

worker.run_forever()
```

This package imports no server module: it talks to the public HTTP API only. Its
other public faces: ``tickwork.client`` (enqueue, read and cancel runs from an
application) and ``tickwork.testing`` (run a handler in a unit test).
"""

from tickwork.core.backoff import Backoff
from tickwork.worker.client import (
    ApiError,
    ApiUnreachable,
    Beat,
    Completed,
    Completion,
    Extended,
    Lease,
    Problem,
    WorkerClient,
)
from tickwork.worker.context import InvalidPayload, NonRetryableError, RunContext, Snooze
from tickwork.worker.credentials import TokenFile
from tickwork.worker.handlers import Handler
from tickwork.worker.results import RunResult
from tickwork.worker.runner import Worker, run
from tickwork.worker.session import WorkerSignals
from tickwork.worker.settings import WorkerSettings, default_worker_id

__all__ = [
    "ApiError",
    "ApiUnreachable",
    "Backoff",
    "Beat",
    "Completed",
    "Completion",
    "Extended",
    "Handler",
    "InvalidPayload",
    "Lease",
    "NonRetryableError",
    "Problem",
    "RunContext",
    "RunResult",
    "Snooze",
    "TokenFile",
    "Worker",
    "WorkerClient",
    "WorkerSettings",
    "WorkerSignals",
    "default_worker_id",
    "run",
]
