"""The demo worker ``tickwork dev --demo-worker`` runs next to the example jobs, so a
newcomer sees runs succeed, fail, retry and land in the DLQ within a minute."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass

from tickwork.api.auth import Role, TokenEntry, generate_token
from tickwork.engine import manifests
from tickwork.engine.manifests import ScheduledJob
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
    """Always fails, half the time with ``NonRetryableError``: such a run is dead at
    once; the others are retried and dead after their last attempt."""
    if random.random() < 0.5:
        raise NonRetryableError("malformed input: retrying cannot help")
    raise ValueError("this job always fails")


HANDLERS = {"hello": say_hello, "flaky-export": flaky_export, "poison-pill": poison_pill}


@dataclass(frozen=True, slots=True)
class DemoWorker:
    """A demo worker for one tenant, with a worker token of its own (never printed: it
    is added to the API's tokens for this process only)."""

    tenant: str
    queues: list[str]
    token: TokenEntry

    @classmethod
    def plan(cls, jobs: Iterable[ScheduledJob]) -> list[DemoWorker]:
        """One worker per tenant of ``jobs`` (tenant ``default`` when there are none),
        leasing the queues those jobs use and ``default``."""
        queues: dict[str, set[str]] = {}
        for job in jobs:
            queues.setdefault(job.tenant, {"default"}).add(job.spec.queue)
        if not queues:
            queues[manifests.DEFAULT_NAMESPACE] = {"default"}
        return [
            cls(
                tenant,
                sorted(names),
                TokenEntry(
                    token=generate_token(),
                    tenant=tenant,
                    role=Role.worker,
                    queues=sorted(names),
                    name=f"dev-demo-worker:{tenant}",
                ),
            )
            for tenant, names in sorted(queues.items())
        ]

    def build(self, url: str) -> Worker:
        worker = Worker(
            url=url,
            token=self.token.token,
            queues=self.queues,
            concurrency=8,
            worker_id=f"demo-worker-{self.tenant}",
            # NOTIFY wakes the long-poll the moment a run is ready; a short one only
            # keeps Ctrl-C quick (stop() lets a pending lease call finish).
            wait_seconds=1.0,
        )
        for job, handler in HANDLERS.items():
            worker.register(handler, job=job)

        async def anything_else(context: RunContext) -> None:
            logger.info("run %s of job %s: nothing to do", context.run_id, context.job)

        worker.register(anything_else)
        return worker
