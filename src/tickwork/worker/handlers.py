"""Handlers: which function runs a leased run, and how it is called.

A handler is registered for one job, for one queue, or as the default; the job's beats
the queue's beats the default. ``async def`` handlers run on the worker's event loop;
plain functions run in the worker's thread pool, so blocking code does not stall the
heartbeats.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

from tickwork.worker.context import RunContext

Handler = Callable[[RunContext], object]
"""A function of the run's context: ``async def`` (runs on the event loop) or plain
``def`` (runs in a worker thread). Returning means success; raising means failure."""

HandlerT = TypeVar("HandlerT", bound=Handler)


class Handlers:
    """The handlers of one worker, by job, by queue, and the default."""

    def __init__(self) -> None:
        self._by_job: dict[str, Handler] = {}
        self._by_queue: dict[str, Handler] = {}
        self._default: Handler | None = None

    def register(
        self, function: Handler, *, job: str | None = None, queue: str | None = None
    ) -> None:
        """Register ``function`` for one job, for one queue, or (neither) as the default."""
        if job is not None and queue is not None:
            raise ValueError("register a handler for a job or for a queue, not both")
        if job is not None:
            table, key = self._by_job, job
        elif queue is not None:
            table, key = self._by_queue, queue
        else:
            if self._default is not None:
                raise ValueError("a default handler is already registered")
            self._default = function
            return
        if key in table:
            raise ValueError(f"a handler is already registered for {key!r}")
        table[key] = function

    def handler_for(self, job: str, queue: str) -> Handler | None:
        """The handler of a run: the job's, else the queue's, else the default."""
        found = self._by_job.get(job)
        if found is None:
            found = self._by_queue.get(queue, self._default)
        return found


async def call(
    handler: Handler,
    context: RunContext,
    loop: asyncio.AbstractEventLoop,
    executor: Executor | None,
) -> None:
    """Run ``handler`` for ``context`` to its end: a coroutine function on ``loop``, a
    plain function in ``executor`` (with the caller's context variables)."""
    # An async function, or an object whose __call__ is one.
    if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__):
        result = handler(context)
    else:
        bound = functools.partial(contextvars.copy_context().run, handler, context)
        result = await loop.run_in_executor(executor, bound)
    if inspect.isawaitable(result):
        await result
