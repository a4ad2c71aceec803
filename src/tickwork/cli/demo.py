"""The demo worker ``tickwork dev --demo-worker`` runs next to the example jobs, so a
newcomer sees runs succeed, fail, retry and land in the DLQ within a minute."""

from __future__ import annotations

import asyncio
import logging
import random

from tickwork.worker import NonRetryableError, RunContext, Worker

logger = logging.getLogger("tickwork.cli.demo")


async def say_hello(context: RunContext) -> None:
    await asyncio.sleep(0.2)
    logger.info("hello from run %s (attempt %d)", context.run_id, context.attempt)


async def flaky_export(context: RunContext) -> None:
    """Fails its first attempt: the run waits in retry_wait, then succeeds."""
    await asyncio.sleep(0.5)
    if context.attempt == 1:
        raise ConnectionError("the export target did not answer (first attempts always fail)")
    logger.info("export %s done on attempt %d", context.idempotency_key, context.attempt)


async def poison_pill(context: RunContext) -> None:
    """Always fails: after its last attempt the run is dead, in the DLQ."""
    if random.random() < 0.5:
        raise NonRetryableError("malformed input: retrying cannot help")
    raise ValueError("this job always fails")


HANDLERS = {"hello": say_hello, "flaky-export": flaky_export, "poison-pill": poison_pill}


def build_worker(url: str, token: str, queues: list[str]) -> Worker:
    worker = Worker(url=url, token=token, queues=queues, concurrency=8, worker_id="demo-worker")
    for job, handler in HANDLERS.items():
        worker.register(handler, job=job)

    async def anything_else(context: RunContext) -> None:
        logger.info("run %s of job %s: nothing to do", context.run_id, context.job)

    worker.register(anything_else)
    return worker
