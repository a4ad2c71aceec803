"""One soak worker process: the worker SDK with handlers per job, reporting every
result it gets (run, attempt, outcome, the API's answer) as a JSON line, flushed, so
the checks can match accepted completions against the store.

Environment: ``TICKWORK_URL``, ``TICKWORK_TOKEN``, ``SOAK_RESULTS`` (the file to append
to), ``SOAK_LEASE_SECONDS``.
"""

from __future__ import annotations

import asyncio
import os
import random

import orjson

from tickwork.worker import NonRetryableError, RunContext, RunResult, Worker


async def handle(context: RunContext) -> None:
    if context.job == "slow":
        await asyncio.sleep(random.uniform(1.0, 3.0))
    else:
        await asyncio.sleep(random.uniform(0.0, 0.05))
    if context.job == "poison":
        raise RuntimeError("poison: fails every attempt")
    if context.job == "fatal":
        raise NonRetryableError("fatal: fails for good")


def main() -> None:
    results = open(os.environ["SOAK_RESULTS"], "ab")  # noqa: SIM115 - open for the process

    def record(result: RunResult) -> None:
        line = {
            "run": result.run_id,
            "job": result.job,
            "attempt": result.attempt,
            "outcome": result.outcome,
            "state": result.state,
            "problem": None if result.problem is None else result.problem.slug,
        }
        results.write(orjson.dumps(line) + b"\n")
        results.flush()

    worker = Worker.from_env(
        concurrency=16,
        lease_seconds=float(os.environ.get("SOAK_LEASE_SECONDS", "6")),
        wait_seconds=2,
        retry_base_seconds=0.1,
        retry_max_seconds=1.0,
        request_timeout=8,
        on_result=record,
    )
    worker.register(handle)
    worker.run_forever()


if __name__ == "__main__":
    main()
