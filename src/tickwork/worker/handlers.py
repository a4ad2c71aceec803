"""Handlers: which function runs a leased run, and how it is called.

A handler is registered for one job, for one queue, or as the default; the job's beats
the queue's beats the default. A handler registered with ``dry_run=True`` supports
dry-run mode: the runs of a job in dry-run mode (``spec.dryRun``) go only to such
handlers, and are skipped (completed as succeeded, untouched) by any other.
``async def`` handlers run on the worker's event loop; plain functions run in the
worker's thread pool, so blocking code does not stall the heartbeats.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable
from typing import TypeVar

from tickwork.worker.context import RunContext
from tickwork.worker.threads import HandlerThreads

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
        # The handlers that support dry-run mode: (by job?, key), and the default's flag.
        self._dry_run_keys: set[tuple[bool, str]] = set()
        self._dry_run_default = False

    def register(
        self,
        function: Handler,
        *,
        job: str | None = None,
        queue: str | None = None,
        dry_run: bool = False,
    ) -> None:
        """Register ``function`` for one job, for one queue, or (neither) as the default;
        ``dry_run=True``: it supports dry-run mode."""
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
            self._dry_run_default = dry_run
            return
        if key in table:
            raise ValueError(f"a handler is already registered for {key!r}")
        table[key] = function
        if dry_run:
            self._dry_run_keys.add((table is self._by_job, key))

    def handler_for(self, job: str, queue: str) -> Handler | None:
        """The handler of a run: the job's, else the queue's, else the default."""
        found = self._by_job.get(job)
        if found is None:
            found = self._by_queue.get(queue, self._default)
        return found

    def supports_dry_run(self, job: str, queue: str) -> bool:
        """Whether the handler of ``job``/``queue`` was registered with ``dry_run=True``."""
        if job in self._by_job:
            return (True, job) in self._dry_run_keys
        if queue in self._by_queue:
            return (False, queue) in self._dry_run_keys
        return self._dry_run_default


def is_async(handler: Handler) -> bool:
    """An async function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        type(handler).__call__
    )


async def call(handler: Handler, context: RunContext, threads: HandlerThreads) -> None:
    """Run ``handler`` for ``context`` to its end: a coroutine function on the event
    loop, a plain function in one of ``threads`` (with the caller's context variables)."""
    if is_async(handler):
        result = handler(context)
    else:
        result = await threads.run(
            functools.partial(contextvars.copy_context().run, handler, context)
        )
    if inspect.isawaitable(result):
        await result
