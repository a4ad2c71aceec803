"""The worker SDK against the real API on a real PostgreSQL, plus a few protocol cases
(batching, retries, refusals) against a scripted fake API.

Tests wait on signals (handler events, ``on_result``, log records, the worker's test
signals) with timeouts, and move time with the injected clock where a lease must
run out: no test sleeps through a lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from aiohttp import web
from polling import eventually

from tickwork.core.records import State
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest
from tickwork.store import sweeps
from tickwork.worker import (
    ApiError,
    Beat,
    NonRetryableError,
    Problem,
    RunContext,
    RunResult,
    TokenFile,
    Worker,
    WorkerClient,
)

pytestmark = pytest.mark.timeout(30)

TENANT = "acme"
WAIT = 10.0  # the most any signal may take before a test fails


# Helpers


class Results:
    """Collects ``on_result`` reports; tests await a number of them."""

    def __init__(self) -> None:
        self.items: list[RunResult] = []
        self._changed = asyncio.Event()

    def __call__(self, result: RunResult) -> None:
        self.items.append(result)
        self._changed.set()

    async def wait(self, count: int) -> list[RunResult]:
        async with asyncio.timeout(WAIT):
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.items[:count]


@contextlib.asynccontextmanager
async def running(worker: Worker, **run: Any) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``worker`` in the background; stop it and wait for ``run()`` on exit."""
    task = asyncio.create_task(worker.run(**run))
    try:
        yield task
    finally:
        worker.stop()
        async with asyncio.timeout(WAIT):
            await task


@contextlib.asynccontextmanager
async def scheduler_loop(api_server: Any) -> AsyncIterator[None]:
    """The scheduler's due flip and reaper, every 0.1 s (woken sooner on request)."""
    scheduler = api_server.scheduler
    scheduler.interval = 0.1
    stop = asyncio.Event()
    task = asyncio.create_task(scheduler.run(stop))
    try:
        yield
    finally:
        stop.set()
        await task


def make_worker(api_server: Any, results: Results | None = None, **settings: Any) -> Worker:
    settings.setdefault("wait_seconds", 0.2)  # stop() lets a pending long-poll finish
    settings.setdefault("complete_window", 0.002)
    return Worker(
        api_server.url,
        api_server.worker_token,
        on_result=results,
        worker_id="test-worker",
        **settings,
    )


async def put_job(api_server: Any, name: str, **spec: Any) -> None:
    await api_server.jobs.put(TENANT, name, JobSpec.model_validate(spec), "test")


async def enqueue(api_server: Any, name: str, payload: Any = None) -> str:
    request = EnqueueRequest(payload=payload, payload_given=payload is not None)
    run, _ = await api_server.jobs.enqueue(TENANT, name, request, "test")
    return str(run.run_id)


async def job_with_worker(
    api_server: Any,
    name: str,
    payload: Any = None,
    spec: dict[str, Any] | None = None,
    **settings: Any,
) -> tuple[str, Results, Worker]:
    """Put job ``name``, enqueue one run of it, and make a worker reporting to new results."""
    await put_job(api_server, name, **(spec or {}))
    run_id = await enqueue(api_server, name, payload)
    results = Results()
    return run_id, results, make_worker(api_server, results, **settings)


async def state_of(api_server: Any, run_id: str) -> Any:
    run, attempts = await api_server.jobs.run(run_id)
    return run, attempts


# The real API


async def test_handler_success_completes_the_run(api_server: Any) -> None:
    run_id, results, worker = await job_with_worker(
        api_server,
        "export-invoices",
        payload={"format": "csv"},
        spec={"queue": "billing"},
        queues=["billing"],
    )
    seen: list[RunContext] = []

    @worker.handler(job="export-invoices")
    async def export(ctx: RunContext) -> str:
        seen.append(ctx)
        return "ignored"

    @worker.handler(queue="billing")
    async def billing(ctx: RunContext) -> None:
        raise AssertionError("the job's handler beats the queue's")

    async with running(worker):
        [result] = await results.wait(1)

    assert result.outcome == "succeeded"
    assert result.state == "succeeded"
    [ctx] = seen
    assert ctx.run_id == run_id
    assert (ctx.job, ctx.tenant, ctx.queue, ctx.attempt) == (
        "export-invoices",
        TENANT,
        "billing",
        1,
    )
    assert ctx.payload == {"format": "csv"}
    assert ctx.fencing_token > 0
    assert ctx.idempotency_key
    assert ctx.deadline is not None and ctx.lease_expires_at is not None
    assert not ctx.cancel_requested and not ctx.cancelled.is_set()
    run, attempts = await state_of(api_server, run_id)
    assert run.state is State.succeeded
    assert [a.worker_id for a in attempts] == ["test-worker"]


async def test_sync_handler_runs_in_a_thread(api_server: Any) -> None:
    run_id, results, worker = await job_with_worker(api_server, "plain")
    threads: list[int] = []

    def plain(ctx: RunContext) -> None:
        threads.append(threading.get_ident())

    worker.register(plain)  # the default handler
    async with running(worker):
        [result] = await results.wait(1)

    assert result.run_id == run_id and result.state == "succeeded"
    assert threads and threads[0] != threading.get_ident()


async def test_failures_retry_then_go_dead(api_server: Any) -> None:
    await put_job(api_server, "flaky", retry={"maxAttempts": 3, "baseSeconds": 0, "maxSeconds": 0})
    run_id = await enqueue(api_server, "flaky")
    results = Results()

    def on_result(result: RunResult) -> None:
        results(result)
        api_server.scheduler.wake()  # promote the retry now

    worker = make_worker(api_server, on_result)  # type: ignore[arg-type]
    attempts_seen: list[int] = []

    @worker.handler(job="flaky")
    async def flaky(ctx: RunContext) -> None:
        attempts_seen.append(ctx.attempt)
        raise RuntimeError(f"boom {ctx.attempt}")

    async with scheduler_loop(api_server), running(worker):
        found = await results.wait(3)

    assert [r.state for r in found] == ["retry_wait", "retry_wait", "dead"]
    assert all(r.outcome == "failed" and r.retryable for r in found)
    assert found[-1].message == "RuntimeError: boom 3"
    assert attempts_seen == [1, 2, 3]
    run, attempts = await state_of(api_server, run_id)
    assert run.state is State.dead
    assert len(attempts) == 3
    assert run.last_error["message"] == "RuntimeError: boom 3"


async def test_non_retryable_error_goes_dead_at_once(api_server: Any) -> None:
    run_id, results, worker = await job_with_worker(
        api_server, "strict", spec={"retry": {"maxAttempts": 5, "baseSeconds": 0}}
    )

    @worker.handler(job="strict")
    async def strict(ctx: RunContext) -> None:
        raise NonRetryableError("customer deleted")

    async with running(worker):
        [result] = await results.wait(1)

    assert (result.state, result.retryable) == ("dead", False)
    run, attempts = await state_of(api_server, run_id)
    assert run.state is State.dead and len(attempts) == 1
    assert run.last_error["retryable"] is False


async def test_a_failing_handler_is_one_log_line_with_the_traceback_at_debug(
    api_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    run_id, results, worker = await job_with_worker(
        api_server, "flaky", spec={"retry": {"maxAttempts": 2, "baseSeconds": 0}}
    )

    @worker.handler(job="flaky")
    async def flaky(ctx: RunContext) -> None:
        raise ConnectionError("the export target did not answer")

    with caplog.at_level(logging.INFO, logger="tickwork.worker"):
        async with running(worker):
            await results.wait(1)
    [line] = [r for r in caplog.records if getattr(r, "action", None) == "failed"]
    assert line.levelno == logging.WARNING and line.exc_info is None
    assert line.getMessage() == (
        f"run {run_id} (flaky, attempt 1) failed: ConnectionError: the export target did not answer"
    )

    caplog.clear()
    run_id = await enqueue(api_server, "flaky")
    results = Results()
    worker = make_worker(api_server, results)
    worker.register(flaky, job="flaky")
    with caplog.at_level(logging.DEBUG, logger="tickwork.worker"):
        async with running(worker):
            await results.wait(1)
    failed = [r for r in caplog.records if getattr(r, "action", None) == "failed"]
    assert [r.levelno for r in failed] == [logging.WARNING, logging.DEBUG]
    assert failed[1].exc_info is not None and "ConnectionError" in caplog.text


async def test_concurrency_limits_runs_in_flight(api_server: Any) -> None:
    await put_job(api_server, "many")
    run_ids = [await enqueue(api_server, "many", {"n": n}) for n in range(8)]
    results = Results()
    worker = make_worker(api_server, results, concurrency=3)
    active = 0
    most = 0
    full = asyncio.Event()
    gate = asyncio.Event()

    @worker.handler(job="many")
    async def many(ctx: RunContext) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        if active == 3:
            full.set()
        await gate.wait()
        active -= 1

    async with running(worker):
        async with asyncio.timeout(WAIT):
            await full.wait()
        leased, _ = await api_server.jobs.runs_of_job(TENANT, "many", State.leased, None, 100)
        assert len(leased) == 3
        assert worker.in_flight == 3
        gate.set()
        found = await results.wait(8)

    assert most == 3
    assert sorted(r.run_id for r in found) == sorted(run_ids)
    assert {r.state for r in found} == {"succeeded"}


async def test_heartbeats_keep_a_run_past_its_lease(api_server: Any) -> None:
    run_id, results, worker = await job_with_worker(api_server, "slow", lease_seconds=1)
    worker.test_signals.init()
    first_expiry: list[Any] = []
    release = asyncio.Event()

    @worker.handler(job="slow")
    async def slow(ctx: RunContext) -> None:
        first_expiry.append(ctx.lease_expires_at)
        await release.wait()  # held past the first lease's end: only heartbeats keep it
        assert ctx.lease_expires_at is not None and ctx.lease_expires_at > first_expiry[0]

    async with running(worker):
        lease = await worker.test_signals.leased.wait(WAIT)
        extended = await worker.test_signals.extended.wait_for(lambda e: e.run_id == run_id, WAIT)
        assert lease.lease_expires_at is not None and extended.lease_expires_at is not None
        assert extended.lease_expires_at > lease.lease_expires_at
        # The reaper, at an instant past the first lease's end (the injected clock):
        # the heartbeat moved the lease beyond it, so nothing is taken back.
        past_first = (
            lease.lease_expires_at + (extended.lease_expires_at - lease.lease_expires_at) / 2
        )
        shard, _ = api_server.jobs.locate_run(run_id)
        async with api_server.database.connection(shard) as conn:
            assert (await sweeps.reap(conn, now=past_first)).total == 0
        release.set()
        [result] = await results.wait(1)

    assert result.state == "succeeded"
    run, attempts = await state_of(api_server, run_id)
    assert run.state is State.succeeded and len(attempts) == 1


@dataclass
class BlockedRun:
    """A run whose handler waits on ``ctx.cancelled``; ``flags`` holds the handler's
    ``(cancel_requested, lost)`` as it saw them when woken."""

    run_id: str
    results: Results
    flags: list[tuple[bool, bool]] = field(default_factory=list)


@contextlib.asynccontextmanager
async def blocked_run(api_server: Any, name: str, **spec: Any) -> AsyncIterator[BlockedRun]:
    """Enqueue a run of ``name`` and yield once a running worker's handler holds it."""
    run_id, results, worker = await job_with_worker(api_server, name, spec=spec, lease_seconds=1.5)
    blocked = BlockedRun(run_id, results)
    started = asyncio.Event()

    @worker.handler(job=name)
    async def wait_for_cancel(ctx: RunContext) -> None:
        started.set()
        await ctx.cancelled.wait()
        blocked.flags.append((ctx.cancel_requested, ctx.lost))

    async with running(worker):
        async with asyncio.timeout(WAIT):
            await started.wait()
        yield blocked


async def test_cancel_requested_reaches_the_handler(api_server: Any) -> None:
    async with blocked_run(api_server, "cancellable") as blocked:
        await api_server.jobs.cancel(blocked.run_id, "test")
        [result] = await blocked.results.wait(1)

    assert blocked.flags == [(True, False)]  # cancel requested, lease not lost
    assert result.state == "cancelled"
    run, _ = await state_of(api_server, blocked.run_id)
    assert run.state is State.cancelled


async def test_lost_lease_drops_the_outcome(api_server: Any) -> None:
    retry = {"maxAttempts": 3, "baseSeconds": 60}
    async with blocked_run(api_server, "lost", retry=retry) as blocked:
        run_id = blocked.run_id
        # The reaper, an hour from now, takes the run back behind the worker's back (one
        # statement, so no heartbeat slips in between; retried if a heartbeat holds the row).
        shard, _ = api_server.jobs.locate_run(run_id)
        later = datetime.now(UTC) + timedelta(hours=1)

        async def reaped() -> bool:
            async with api_server.database.connection(shard) as conn:
                return bool((await sweeps.reap(conn, now=later)).total)

        await eventually(reaped, within=WAIT, every=0.01, what="the run reaped")
        [result] = await blocked.results.wait(1)

    assert blocked.flags == [(False, True)]  # lease lost, no cancel requested
    assert result.outcome == "dropped" and result.state is None
    run, _ = await state_of(api_server, run_id)
    assert run.state is State.retry_wait
    assert run.last_error["reason"] == "lease-expired"


async def stop_once_started(worker: Worker, started: asyncio.Event) -> asyncio.Task[None]:
    """Run ``worker`` until ``started`` is set, then stop it; returns the draining run."""
    task = asyncio.create_task(worker.run())
    async with asyncio.timeout(WAIT):
        await started.wait()
    worker.stop()
    return task


async def test_stop_drains_in_flight_runs(api_server: Any) -> None:
    first, results, worker = await job_with_worker(api_server, "drain", concurrency=1)
    started = asyncio.Event()
    gate = asyncio.Event()

    @worker.handler(job="drain")
    async def drain(ctx: RunContext) -> None:
        started.set()
        await gate.wait()

    task = await stop_once_started(worker, started)
    second = await enqueue(api_server, "drain")  # not leased: the worker is draining
    gate.set()
    async with asyncio.timeout(WAIT):
        await task

    assert [(r.run_id, r.state) for r in results.items] == [(first, "succeeded")]
    assert (await state_of(api_server, first))[0].state is State.succeeded
    assert (await state_of(api_server, second))[0].state is State.ready


async def test_drain_timeout_fails_unfinished_runs_for_a_retry(api_server: Any) -> None:
    run_id, results, worker = await job_with_worker(
        api_server,
        "hangs",
        spec={"retry": {"maxAttempts": 3, "baseSeconds": 60}},
        drain_timeout=0.1,
    )
    started = asyncio.Event()

    @worker.handler(job="hangs")
    async def hangs(ctx: RunContext) -> None:
        started.set()
        await asyncio.Event().wait()  # never returns on its own

    task = await stop_once_started(worker, started)
    async with asyncio.timeout(WAIT):
        await task

    [result] = results.items
    assert (result.outcome, result.retryable, result.state) == ("failed", True, "retry_wait")
    assert result.message == "worker stopped before the handler finished"
    assert (await state_of(api_server, run_id))[0].state is State.retry_wait


async def test_sigterm_drains_and_completes(api_server: Any) -> None:
    run_id, results, worker = await job_with_worker(api_server, "sigterm")
    started = asyncio.Event()
    release = threading.Event()

    @worker.handler(job="sigterm")
    def blocking(ctx: RunContext) -> None:
        asyncio.run_coroutine_threadsafe(_set(started), loop)
        release.wait(WAIT)

    loop = asyncio.get_running_loop()
    draining = ActionLog("drain")
    with draining.attached():
        task = asyncio.create_task(worker.run(install_signal_handlers=True))
        async with asyncio.timeout(WAIT):
            await started.wait()
        # Only send the signal once the worker's handler is installed: never kill pytest.
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
        os.kill(os.getpid(), signal.SIGTERM)
        async with asyncio.timeout(WAIT):
            await draining.reached.wait()
        release.set()  # the handler finishes only after the worker began draining
        async with asyncio.timeout(WAIT):
            await task

    assert [(r.run_id, r.state) for r in results.items] == [(run_id, "succeeded")]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def _set(event: asyncio.Event) -> None:
    event.set()


class ActionLog(logging.Handler):
    """Collects the worker's log records of one ``action``; signals when enough arrived.
    (Records come from the event loop's thread, so setting the event is safe.)"""

    def __init__(self, action: str, enough: int = 1) -> None:
        super().__init__(logging.DEBUG)
        self.action = action
        self.records: list[logging.LogRecord] = []
        self.enough = enough
        self.reached = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "action", None) == self.action:
            self.records.append(record)
            if len(self.records) >= self.enough:
                self.reached.set()

    @contextlib.contextmanager
    def attached(self) -> Iterator[ActionLog]:
        logger = logging.getLogger("tickwork.worker")
        level = logger.level
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        try:
            yield self
        finally:
            logger.removeHandler(self)
            logger.setLevel(level)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_reconnects_with_backoff_and_stops_cleanly() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    worker = Worker(url, "token", retry_base_seconds=0.01, retry_max_seconds=0.05)
    with ActionLog("api-retry", enough=4).attached() as handler:
        task = asyncio.create_task(worker.run())
        async with asyncio.timeout(WAIT):
            await handler.reached.wait()
        worker.stop()
        async with asyncio.timeout(WAIT):
            await task  # no exception: connection errors are not fatal
    retries = [getattr(r, "retry", 0) for r in handler.records[:4]]
    assert retries == [1, 2, 3, 4]
    assert all(getattr(r, "call", None) == "lease" for r in handler.records)


async def test_refused_token_stops_the_worker(api_server: Any) -> None:
    worker = Worker(api_server.url, "no-such-token")
    with pytest.raises(ApiError) as raised:
        async with asyncio.timeout(WAIT):
            await worker.run()
    assert raised.value.status == 401
    assert raised.value.problem.slug == "unauthenticated"


async def test_a_rotated_token_file_is_read_again_when_the_api_refuses_the_old_token(
    api_server: Any, tmp_path: Any
) -> None:
    """A projected ServiceAccount token rotates under a long-running worker: the call
    refused with the token read earlier goes through with the file's new one."""
    path = tmp_path / "token"
    path.write_text("expired-token\n")
    source = TokenFile(path)
    path.write_text(api_server.worker_token + "\n")  # the kubelet rotated it since
    await put_job(api_server, "rotated")
    run_id = await enqueue(api_server, "rotated")
    results = Results()
    worker = Worker(api_server.url, source, on_result=results, wait_seconds=0.2)
    worker.register(lambda ctx: None, job="rotated")
    async with running(worker):
        [result] = await results.wait(1)
    assert (result.run_id, result.outcome) == (run_id, "succeeded")
    assert source.token() == api_server.worker_token


async def test_a_token_file_that_still_holds_a_refused_token_stops_the_worker(
    api_server: Any, tmp_path: Any
) -> None:
    path = tmp_path / "token"
    path.write_text("no-such-token")
    worker = Worker(api_server.url, TokenFile(path))
    with pytest.raises(ApiError) as raised:
        async with asyncio.timeout(WAIT):
            await worker.run()
    assert raised.value.status == 401


def test_a_token_file_is_read_again_after_its_period_and_kept_when_unreadable(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token"
    path.write_text("first")
    now = [0.0]
    source = TokenFile(path, reread_seconds=60, clock=lambda: now[0])
    path.write_text("second")
    now[0] = 59.0
    assert source.token() == "first"
    now[0] = 60.0
    assert source.token() == "second"
    path.write_text("")  # caught mid-rotation, or wiped: the last good token stays
    now[0] = 120.0
    with caplog.at_level(logging.WARNING, "tickwork.worker"):
        assert source.token() == "second"
    assert "is empty" in caplog.text
    path.unlink()
    with pytest.raises(ValueError, match="cannot read the token file"):
        TokenFile(path)


async def test_client_single_run_endpoints(api_server: Any) -> None:
    await put_job(api_server, "single")
    run_id = await enqueue(api_server, "single", {"a": 1})
    async with WorkerClient(api_server.url, api_server.worker_token) as client:
        [lease] = await client.lease(["default"], max_runs=5, worker_id="raw")
        assert (lease.run_id, lease.payload) == (run_id, {"a": 1})
        extended = await client.heartbeat(run_id, lease.fencing_token, 60)
        assert not extended.cancel_requested
        done = await client.complete(run_id, lease.fencing_token, "succeeded")
        assert done.state == "succeeded"
        again = await client.complete(run_id, lease.fencing_token, "succeeded")
        assert again.state == "succeeded"  # idempotent
        [answer] = await client.heartbeat_many([Beat(run_id, lease.fencing_token, 30)])
        assert isinstance(answer, Problem) and answer.stale_lease and answer.status == 409


# A scripted fake API: protocol cases the real server cannot be made to produce on cue.


@dataclass
class FakeApi:
    """Hands out ``leases`` once, records every call, and answers completions with
    ``complete_answers`` (a status, or None for the normal answer) in turn."""

    leases: list[dict[str, Any]]
    complete_answers: list[int | None] = field(default_factory=list)
    heartbeat_problem: dict[str, Any] | None = None
    # Run ids whose next completion is answered as an item whose shard was down.
    unavailable_once: set[str] = field(default_factory=set)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    completed: asyncio.Event = field(default_factory=asyncio.Event)
    expect_completed: int = 0
    done: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/lease", self.lease)
        app.router.add_post("/v1/runs:heartbeat", self.heartbeat)
        app.router.add_post("/v1/runs:complete", self.complete)
        return app

    async def lease(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.calls.append(("lease", body))
        assert request.headers["Authorization"] == "Bearer fake-token"
        granted, self.leases = self.leases[: body["max"]], self.leases[body["max"] :]
        if not granted:
            await asyncio.sleep(min(body["waitSeconds"], 0.05))
        return web.Response(body=orjson.dumps({"leases": granted}), content_type="application/json")

    async def heartbeat(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.calls.append(("heartbeat", body))
        items = [
            {"runId": i["runId"], "problem": self.heartbeat_problem}
            if self.heartbeat_problem
            else {
                "runId": i["runId"],
                "leaseExpiresAt": "2030-01-01T00:00:00Z",
                "cancelRequested": False,
            }
            for i in body["items"]
        ]
        return web.Response(body=orjson.dumps({"items": items}), content_type="application/json")

    async def complete(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.calls.append(("complete", body))
        status = self.complete_answers.pop(0) if self.complete_answers else None
        if status is not None:
            problem = {
                "type": "https://tickwork.dev/problems/internal",
                "title": "x",
                "status": status,
            }
            return web.Response(
                status=status, body=orjson.dumps(problem), content_type="application/problem+json"
            )
        items: list[dict[str, Any]] = []
        for item in body["items"]:
            if item["runId"] in self.unavailable_once:
                self.unavailable_once.discard(item["runId"])
                items.append({"runId": item["runId"], "problem": SHARD_DOWN})
            else:
                items.append({"runId": item["runId"], "state": "succeeded"})
                self.done += 1
        if self.done >= self.expect_completed:
            self.completed.set()
        return web.Response(body=orjson.dumps({"items": items}), content_type="application/json")


SHARD_DOWN = {
    "type": "https://tickwork.dev/problems/store-unavailable",
    "title": "Store unavailable",
    "status": 503,
    "detail": "shard 0 is unavailable (ConnectionResetError); repeat this item shortly",
}


def fake_lease(n: int) -> dict[str, Any]:
    return {
        "runId": f"r0-{n}",
        "job": "fake",
        "tenant": "acme",
        "queue": "default",
        "priority": "default",
        "attempt": 1,
        "idempotencyKey": f"acme/fake#r0-{n}",
        "fencingToken": 100 + n,
        "dueAt": "2026-03-15T01:00:00Z",
        "leaseExpiresAt": "2026-03-15T01:00:30Z",
        "deadline": "2026-03-15T02:00:00Z",
        "payload": {"n": n},
    }


@contextlib.asynccontextmanager
async def serve(fake: FakeApi) -> AsyncIterator[str]:
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def run_fake(
    fake: FakeApi, handler: Callable[[RunContext], Awaitable[None]], **settings: Any
) -> Results:
    results = Results()
    async with serve(fake) as url:
        settings.setdefault("wait_seconds", 0.05)
        worker = Worker(url, "fake-token", on_result=results, **settings)
        worker.register(handler)
        async with running(worker):
            async with asyncio.timeout(WAIT):
                await fake.completed.wait()
    return results


async def test_runs_finishing_together_share_one_completion_call() -> None:
    fake = FakeApi(leases=[fake_lease(n) for n in range(5)], expect_completed=5)

    async def quick(ctx: RunContext) -> None:
        return None

    results = await run_fake(fake, quick, concurrency=10, complete_window=0.05)
    [lease_call, *_] = [body for name, body in fake.calls if name == "lease"]
    assert lease_call["max"] == 10 and lease_call["queues"] == ["default"]
    completes = [body for name, body in fake.calls if name == "complete"]
    assert len(completes) == 1 and len(completes[0]["items"]) == 5
    assert completes[0]["items"][0] == {
        "runId": "r0-0",
        "fencingToken": 100,
        "outcome": "succeeded",
    }
    assert len(results.items) == 5


@dataclass
class CountedLeases(FakeApi):
    """A fake API that tells when it has answered a number of lease calls."""

    answered: asyncio.Event = field(default_factory=asyncio.Event)

    async def lease(self, request: web.Request) -> web.Response:
        response = await super().lease(request)
        self.answered.set()
        return response

    async def leased(self, calls: int) -> list[int]:
        """The ``max`` of each lease call, once there have been ``calls``."""
        while len(asked := [body["max"] for name, body in self.calls if name == "lease"]) < calls:
            self.answered.clear()
            await self.answered.wait()
        return asked


async def test_slots_freed_moments_apart_are_leased_in_one_call() -> None:
    fake = CountedLeases(leases=[fake_lease(n) for n in range(10)], expect_completed=10)
    release = {n: asyncio.Event() for n in range(10)}

    async def held(ctx: RunContext) -> None:
        await release[ctx.payload["n"]].wait()

    results = Results()
    async with serve(fake) as url:
        worker = Worker(
            url,
            "fake-token",
            on_result=results,
            concurrency=10,
            wait_seconds=0.05,
            complete_window=0.001,
            lease_window=5.0,  # far longer than the test takes to free the other slots
        )
        worker.register(held)
        async with running(worker), asyncio.timeout(WAIT):
            await fake.leased(1)
            release[0].set()
            await results.wait(1)  # one slot free, and the worker has seen it
            for event in release.values():
                event.set()
            asked = await fake.leased(2)
    # Not a call for the first slot freed and another for the other nine.
    assert asked[:2] == [10, 10]


async def test_completion_retries_after_server_errors() -> None:
    fake = FakeApi(leases=[fake_lease(1)], complete_answers=[503, 500], expect_completed=1)

    async def failing(ctx: RunContext) -> None:
        raise ValueError("bad")

    results = await run_fake(fake, failing, retry_base_seconds=0.01, retry_max_seconds=0.02)
    completes = [body for name, body in fake.calls if name == "complete"]
    assert len(completes) == 3  # the same completion, repeated: idempotent on the server
    assert completes[-1]["items"] == [
        {
            "runId": "r0-1",
            "fencingToken": 101,
            "outcome": "failed",
            "error": {"message": "ValueError: bad", "retryable": True},
        }
    ]
    assert results.items[0].state == "succeeded"


async def test_only_the_items_whose_shard_was_down_are_completed_again() -> None:
    fake = FakeApi(
        leases=[fake_lease(n) for n in range(3)], unavailable_once={"r0-1"}, expect_completed=3
    )

    async def quick(ctx: RunContext) -> None:
        return None

    results = await run_fake(
        fake, quick, complete_window=0.05, retry_base_seconds=0.01, retry_max_seconds=0.02
    )
    completes = [
        [i["runId"] for i in body["items"]] for name, body in fake.calls if name == "complete"
    ]
    assert completes == [["r0-0", "r0-1", "r0-2"], ["r0-1"]]
    assert sorted((r.run_id, r.state) for r in results.items) == [
        ("r0-0", "succeeded"),
        ("r0-1", "succeeded"),
        ("r0-2", "succeeded"),
    ]


async def test_stale_heartbeat_marks_the_context_lost() -> None:
    stale = {
        "type": "https://tickwork.dev/problems/stale-lease",
        "title": "Stale lease",
        "status": 409,
        "detail": "lease gone",
    }
    fake = FakeApi(leases=[fake_lease(1)], heartbeat_problem=stale)
    lost = asyncio.Event()

    async def waits(ctx: RunContext) -> None:
        await ctx.cancelled.wait()
        assert ctx.lost
        lost.set()

    results = Results()
    async with serve(fake) as url:
        worker = Worker(url, "fake-token", on_result=results, lease_seconds=1, wait_seconds=0.05)
        worker.register(waits)
        async with running(worker):
            [result] = await results.wait(1)
    assert lost.is_set()
    assert result.outcome == "dropped"
    assert not [name for name, _ in fake.calls if name == "complete"]
    [beat] = [body for name, body in fake.calls if name == "heartbeat"]
    assert beat["items"] == [{"runId": "r0-1", "fencingToken": 101, "extendSeconds": 1}]


# Settings


def test_from_env_reads_url_token_and_queues() -> None:
    env = {
        "TICKWORK_URL": "http://api:8080",
        "TICKWORK_TOKEN": "t",
        "TICKWORK_QUEUES": "billing, default,",
    }
    worker = Worker.from_env(env, concurrency=4)
    assert (worker.url, worker.queues, worker.concurrency) == (
        "http://api:8080",
        ["billing", "default"],
        4,
    )
    assert worker.worker_id.endswith(f"-{os.getpid()}")
    with pytest.raises(ValueError, match="TICKWORK_TOKEN"):
        Worker.from_env({"TICKWORK_URL": "http://api:8080"})


def test_from_env_reads_a_token_file(tmp_path: Any) -> None:
    path = tmp_path / "token"
    path.write_text("from-the-file\n")
    env = {"TICKWORK_URL": "http://api:8080", "TICKWORK_TOKEN_FILE": str(path)}
    worker = Worker.from_env(env)
    assert isinstance(worker._token, TokenFile) and worker._token.token() == "from-the-file"
    with pytest.raises(ValueError, match="not both"):
        Worker.from_env(env | {"TICKWORK_TOKEN": "t"})
    with pytest.raises(ValueError, match="cannot read the token file"):
        Worker.from_env(env | {"TICKWORK_TOKEN_FILE": str(tmp_path / "missing")})


def test_handler_resolution_job_then_queue_then_default() -> None:
    worker = Worker("http://api", "t")

    def job(ctx: RunContext) -> None: ...
    def queue(ctx: RunContext) -> None: ...
    def default(ctx: RunContext) -> None: ...

    worker.register(job, job="a")
    worker.register(queue, queue="q")
    assert worker.handler_for("b", "other") is None
    worker.register(default)
    assert worker.handler_for("a", "q") is job
    assert worker.handler_for("b", "q") is queue
    assert worker.handler_for("b", "other") is default
    with pytest.raises(ValueError):
        worker.register(default, job="a")
    with pytest.raises(ValueError):
        worker.register(default, job="x", queue="q")
