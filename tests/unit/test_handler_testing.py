"""``tickwork.testing``: a handler run in a unit test, without a server, reports what
the worker would: succeeded, or failed with its message and whether it is retried."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

import pydantic
import pytest

from tickwork.testing import (
    HandlerResult,
    InvalidPayload,
    NonRetryableError,
    RunContext,
    make_context,
    run_handler,
    run_handler_async,
)
from tickwork.worker import Worker


class Export(pydantic.BaseModel):
    format: str
    rows: int = 0


@dataclass
class Window:
    start: datetime
    days: int


def test_a_plain_handler_succeeds_with_the_context_a_worker_would_give() -> None:
    seen: list[RunContext] = []

    def export(ctx: RunContext) -> str:
        seen.append(ctx)
        return "done"

    result = run_handler(export, {"format": "csv"}, job="export-invoices", attempt=3)
    assert isinstance(result, HandlerResult)
    assert (result.outcome, result.succeeded, result.returned) == ("succeeded", True, "done")
    [ctx] = seen
    assert ctx is result.context
    assert (ctx.job, ctx.attempt, ctx.payload, ctx.dry_run) == (
        "export-invoices",
        3,
        {"format": "csv"},
        False,
    )
    assert ctx.idempotency_key == "test/export-invoices#r0-1"
    assert ctx.deadline is not None and ctx.due_at is not None
    assert not ctx.cancelled.is_set()


def test_an_async_handler_runs_to_its_end() -> None:
    async def export(ctx: RunContext) -> None:
        await asyncio.sleep(0)
        if ctx.attempt < 2:
            raise ConnectionError("the target did not answer")

    first = run_handler(export)
    assert (first.outcome, first.retryable) == ("failed", True)
    assert first.message == "ConnectionError: the target did not answer"
    assert isinstance(first.error, ConnectionError)
    assert run_handler(export, attempt=2).succeeded


def test_failures_are_reported_as_the_worker_reports_them() -> None:
    def strict(ctx: RunContext) -> None:
        raise NonRetryableError("customer deleted")

    def broken(ctx: RunContext) -> None:
        raise KeyError("format")

    dead = run_handler(strict)
    assert (dead.failed, dead.retryable, dead.message) == (
        True,
        False,
        "NonRetryableError: customer deleted",
    )
    retried = run_handler(broken)
    assert (retried.failed, retried.retryable, retried.message) == (
        True,
        True,
        "KeyError: 'format'",
    )


def test_a_dry_run_reaches_the_function_and_the_worker_routes_it_as_it_would() -> None:
    effects: list[str] = []

    def export(ctx: RunContext) -> None:
        effects.append("logged" if ctx.dry_run else "written")

    assert run_handler(export, dry_run=True).succeeded
    assert effects == ["logged"]

    worker = Worker("http://unused", "token")
    worker.register(export, job="aware", dry_run=True)
    worker.register(export, job="unaware")
    aware = run_handler(worker, job="aware", dry_run=True)
    unaware = run_handler(worker, job="unaware", dry_run=True)
    assert (aware.skipped, unaware.skipped, unaware.succeeded) == (False, True, True)
    assert effects == ["logged", "logged"]  # the unaware handler was never called


def test_a_worker_finds_the_handler_it_would_run() -> None:
    worker = Worker("http://unused", "token")
    calls: list[str] = []

    @worker.handler(job="export")
    def export(ctx: RunContext) -> None:
        calls.append("export")

    @worker.handler(queue="billing")
    async def billing(ctx: RunContext) -> None:
        calls.append("billing")

    assert run_handler(worker, job="export", queue="billing").succeeded
    assert run_handler(worker, job="other", queue="billing").succeeded
    assert calls == ["export", "billing"]
    missing = run_handler(worker, job="other")
    assert (missing.failed, missing.retryable) == (True, True)
    assert missing.message == "worker test-worker has no handler for job 'other'"


def test_a_cancelled_run_is_seen_by_the_handler() -> None:
    async def crunch(ctx: RunContext) -> int:
        return 0 if ctx.cancelled.is_set() else 5

    assert run_handler(crunch, cancel_requested=True).returned == 0
    assert run_handler(crunch).returned == 5


def test_the_payload_is_what_the_api_would_hand_over() -> None:
    start = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    ctx = make_context({"export": Export(format="csv"), "when": start, "ids": (1, 2)})
    assert ctx.payload == {
        "export": {"format": "csv", "rows": 0},
        "when": "2026-03-29T01:30:00Z",
        "ids": [1, 2],
    }
    with pytest.raises(ValueError, match="attempt counts from 1"):
        make_context(attempt=0)


def test_a_typed_payload_is_validated_before_the_handler_runs() -> None:
    seen: list[object] = []

    async def export(ctx: RunContext, export: Export) -> None:
        seen.append(export)

    def window(ctx: RunContext, window: Window) -> int:
        return window.days

    assert run_handler(export, {"format": "csv", "rows": "12"}).succeeded
    assert seen == [Export(format="csv", rows=12)]
    assert run_handler(window, {"start": "2026-03-01T00:00:00Z", "days": 7}).returned == 7

    invalid = run_handler(export, {"rows": "many"})
    assert (invalid.failed, invalid.retryable) == (True, False)
    assert isinstance(invalid.error, InvalidPayload)
    assert invalid.error.field == "payload.format"
    assert invalid.message == (
        "InvalidPayload: the payload is not a valid Export: payload.format: Field required; "
        "payload.rows: Input should be a valid integer, unable to parse string as an integer"
    )
    assert len(seen) == 1  # the handler was not called


def test_run_handler_inside_an_event_loop_says_to_await_the_async_one() -> None:
    async def inside() -> None:
        run_handler(lambda ctx: None)

    with pytest.raises(RuntimeError, match="await run_handler_async"):
        asyncio.run(inside())


async def test_run_handler_async_runs_plain_handlers_in_a_thread_as_the_worker_does() -> None:
    threads: list[int] = []

    def blocking(ctx: RunContext) -> None:
        threads.append(threading.get_ident())

    async def on_the_loop(ctx: RunContext, payload: Export) -> str:
        threads.append(threading.get_ident())
        return payload.format

    assert (await run_handler_async(blocking)).succeeded
    result = await run_handler_async(on_the_loop, {"format": "json"}, dry_run=True)
    assert (result.returned, result.context.dry_run) == ("json", True)
    assert threads[0] != threading.get_ident() and threads[1] == threading.get_ident()
