"""Dry-run mode: a job with ``dryRun: true`` is scheduled and leased as usual, every
lease says ``dryRun: true``, and the worker SDK gives such runs only to handlers that
declared dry-run support."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from conftest import ApiServer
from test_worker import Results, enqueue, make_worker, put_job, running

from tickwork.core.records import State
from tickwork.core.spec import JobSpec
from tickwork.engine.scheduler import Scheduler
from tickwork.worker import RunContext

pytestmark = pytest.mark.timeout(30)


async def lease_json(api_server: ApiServer, queue: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(api_server.worker_token)
    ) as http:
        answer = await http.post("/v1/lease", json={"queues": [queue], "max": 10})
    assert answer.status_code == 200, answer.text
    leases: list[dict[str, Any]] = answer.json()["leases"]
    return leases


async def test_every_lease_says_whether_its_job_is_in_dry_run_mode(
    api_server: ApiServer,
) -> None:
    await put_job(api_server, "shadow", queue="billing", dryRun=True)
    await put_job(api_server, "real", queue="billing")
    shadow = await enqueue(api_server, "shadow")
    real = await enqueue(api_server, "real")
    by_run = {lease["runId"]: lease for lease in await lease_json(api_server, "billing")}
    assert (by_run[shadow]["dryRun"], by_run[real]["dryRun"]) == (True, False)


async def test_switching_dry_run_applies_to_the_runs_not_yet_leased(
    api_server: ApiServer,
) -> None:
    spec: dict[str, Any] = {
        "schedule": {"cron": "* * * * *", "jitterSeconds": 0},
        "queue": "billing",
        "dryRun": True,
    }
    await put_job(api_server, "moving", **spec)
    scheduler = Scheduler(api_server.database)
    await scheduler.pass_once()  # the next minute's run is materialised, in dry-run mode
    waiting = await enqueue(api_server, "moving")
    await api_server.jobs.put(
        "acme", "moving", JobSpec.model_validate({**spec, "dryRun": False}), "test"
    )
    (lease,) = [x for x in await lease_json(api_server, "billing") if x["runId"] == waiting]
    assert lease["dryRun"] is False  # switched over: no run still shadows


async def test_the_sdk_gives_dry_runs_only_to_handlers_that_support_them(
    api_server: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    await put_job(api_server, "shadow", queue="billing", dryRun=True)
    await put_job(api_server, "unaware", queue="billing", dryRun=True)
    await put_job(api_server, "real", queue="billing")
    runs = {name: await enqueue(api_server, name) for name in ("shadow", "unaware", "real")}
    results = Results()
    worker = make_worker(api_server, results, queues=["billing"])
    seen: dict[str, bool] = {}

    @worker.handler(job="shadow", dry_run=True)
    async def shadow(ctx: RunContext) -> None:
        seen[ctx.job] = ctx.dry_run

    @worker.handler(queue="billing")
    async def anything(ctx: RunContext) -> None:  # knows nothing of dry runs
        seen[ctx.job] = ctx.dry_run

    with caplog.at_level(logging.INFO, logger="tickwork.worker"):
        async with running(worker):
            await results.wait(3)
    assert seen == {"shadow": True, "real": False}  # "unaware" was never handed over
    assert "dry-run-skipped" in [getattr(r, "action", None) for r in caplog.records]
    for run_id in runs.values():
        run, _ = await api_server.jobs.run(run_id)
        assert run.state is State.succeeded
