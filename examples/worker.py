"""A sample worker for the example jobs in ``examples/jobs``.

Start the API with ``tickwork dev --manifests examples/jobs`` (it prints the URL and a
token), then::

    export TICKWORK_URL=http://127.0.0.1:8080 TICKWORK_TOKEN=<token>
    export TICKWORK_QUEUES=default,billing
    python examples/worker.py

Ctrl-C or SIGTERM stops leasing, lets running handlers finish, reports them and exits.
"""

from __future__ import annotations

import asyncio
import logging

from tickwork.worker import NonRetryableError, RunContext, Worker

log = logging.getLogger("example-worker")


async def hello(ctx: RunContext) -> None:
    log.info("%s: %s (attempt %d)", ctx.run_id, (ctx.payload or {}).get("greeting"), ctx.attempt)


async def flaky_export(ctx: RunContext) -> None:
    """Writes an export in steps; stops early if the run is cancelled or the lease lost."""
    export_format = (ctx.payload or {}).get("format", "csv")
    if export_format not in ("csv", "json"):
        raise NonRetryableError(f"unknown format {export_format!r}")  # straight to the DLQ
    if ctx.attempt == 1:
        raise ConnectionError("the export target did not answer")  # retried with backoff
    for step in range(5):
        if ctx.cancelled.is_set():
            log.info("%s: stopping at step %d", ctx.run_id, step)
            return
        # A real handler writes with ctx.fencing_token and keys its effects by
        # ctx.idempotency_key, so a retry or a slow twin cannot write twice.
        await asyncio.sleep(0.2)
    log.info("%s: exported as %s (key %s)", ctx.run_id, export_format, ctx.idempotency_key)


def poison_pill(ctx: RunContext) -> None:
    """A plain function runs in a thread; this one always fails and ends in the DLQ."""
    raise ValueError("this job always fails")


def anything_else(ctx: RunContext) -> None:
    log.info("%s: job %s has no handler of its own", ctx.run_id, ctx.job)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    worker = Worker.from_env(concurrency=8)
    worker.register(hello, job="hello")
    worker.register(flaky_export, job="flaky-export")
    worker.register(poison_pill, job="poison-pill")
    worker.register(anything_else)  # the default handler
    worker.run_forever()  # SIGTERM/SIGINT: stop leasing, finish running handlers, exit


if __name__ == "__main__":
    main()
