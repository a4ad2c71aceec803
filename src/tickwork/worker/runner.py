"""The Worker: lease runs, run their handlers concurrently, heartbeat, complete, drain.

Three loops share one HTTP session:

- the lease loop long-polls ``POST /v1/lease`` for as many runs as there are free
  handler slots (at most 100), and starts one asyncio task per run;
- the heartbeat loop extends every held lease at a third of its length, in batches
  (``POST /v1/runs:heartbeat``), and passes ``cancelRequested`` and lost leases on to
  the handlers' contexts;
- the completion loop reports outcomes in batches (``POST /v1/runs:complete``),
  collecting for a few milliseconds so runs that finish together share a call.

A run stays in the heartbeat set until its completion is acknowledged, so a slow or
briefly unreachable API does not cost the lease. Connection errors, 5xx and 429 are
retried with exponential backoff and jitter; any other error answer to a lease call
(a bad token, a queue the token may not lease) stops the worker after draining.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import random
import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from tickwork.core import limits
from tickwork.worker.client import (
    ApiError,
    Beat,
    Completed,
    Completion,
    Lease,
    Problem,
    WorkerClient,
    is_transient,
)
from tickwork.worker.context import NonRetryableError, RunContext

log: Final = logging.getLogger("tickwork.worker")

Handler = Callable[[RunContext], object]
"""A function of the run's context: ``async def`` (runs on the event loop) or plain
``def`` (runs in a worker thread). Returning means success; raising means failure."""

HandlerT = TypeVar("HandlerT", bound=Handler)

MAX_MESSAGE: Final = 4000
COMPLETION_GRACE_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class RunResult:
    """What became of one leased run, reported to ``on_result``.

    ``outcome`` is what the handler did (``dropped``: the lease was lost, so nothing
    was reported); ``state`` is the API's answer to the completion (``succeeded``,
    ``retry_wait``, ``dead``, ``cancelled``), or None with ``problem`` set when the
    completion was refused or could not be delivered.
    """

    run_id: str
    job: str
    attempt: int
    outcome: Literal["succeeded", "failed", "dropped"]
    message: str | None = None
    retryable: bool = True
    state: str | None = None
    problem: Problem | None = None


class Backoff:
    """Exponential backoff with jitter: ``ceiling = min(maximum, base * 2**failures)``,
    the delay drawn from ``[ceiling / 2, ceiling]``."""

    def __init__(self, base: float, maximum: float, rng: random.Random) -> None:
        self.base = base
        self.maximum = maximum
        self.failures = 0
        self._rng = rng

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.base * 2.0 ** min(self.failures, 32))
        self.failures += 1
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0


@dataclass(slots=True, eq=False)
class _Held:
    """A run this worker holds a lease on, from lease until its completion is answered."""

    context: RunContext
    next_beat: float
    completion: Completion | None = None
    completing: bool = False


def default_worker_id() -> str:
    """``<hostname>-<pid>``: unique per process, readable in run attempts."""
    return f"{socket.gethostname()}-{os.getpid()}"


class Worker:
    """Leases runs of ``queues`` and runs their handlers, up to ``concurrency`` at once.

    Register handlers per job, per queue, or as the default (job beats queue beats
    default), then ``await worker.run()`` or call ``worker.run_forever()``.

    Settings:
        url: the tickwork API, e.g. ``http://tickwork:8080``.
        token: the worker's bearer token.
        queues: the queues to lease from.
        concurrency: the most handlers running at once (and the most runs held).
        lease_seconds: the lease asked for; heartbeats come at a third of it.
        wait_seconds: the long-poll of each lease call (0-20).
        worker_id: recorded with each attempt; defaults to ``<hostname>-<pid>``.
        drain_timeout: how long after ``stop()`` running handlers may take before they
            are cancelled (their runs are then failed as retryable). Completions get
            5 s more, so keep it under the pod's termination grace period minus 5 s.
        complete_window: how long a finished run waits for others to share its
            completion call.
        retry_base_seconds, retry_max_seconds: the backoff when the API is unreachable.
        request_timeout: the bound of each HTTP call (a lease call gets
            ``wait_seconds`` on top).
        on_result: called on the event loop with a ``RunResult`` for each run.
    """

    _tasks: set[asyncio.Task[None]]  # one per running handler
    _held: dict[str, _Held]  # every run whose lease this worker holds, by run id
    _pending: list[_Held]  # finished runs whose completion is not sent yet
    _lease_call: asyncio.Task[list[Lease]] | None
    _executor: ThreadPoolExecutor | None  # the threads of plain-function handlers
    _stopped_at: float | None  # loop time of the first stop()

    def __init__(
        self,
        url: str,
        token: str,
        *,
        queues: Sequence[str] = ("default",),
        concurrency: int = 10,
        lease_seconds: float = 30.0,
        wait_seconds: float = 10.0,
        worker_id: str | None = None,
        drain_timeout: float = 20.0,
        complete_window: float = 0.005,
        retry_base_seconds: float = 0.5,
        retry_max_seconds: float = 30.0,
        request_timeout: float = 30.0,
        on_result: Callable[[RunResult], object] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if isinstance(queues, str):
            queues = [queues]
        if not queues:
            raise ValueError("queues: give at least one queue to lease from")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not limits.MIN_LEASE_SECONDS <= lease_seconds <= limits.MAX_LEASE_SECONDS:
            raise ValueError(
                f"lease_seconds must be {limits.MIN_LEASE_SECONDS}..{limits.MAX_LEASE_SECONDS}"
            )
        if not 0 <= wait_seconds <= limits.MAX_WAIT_SECONDS:
            raise ValueError(f"wait_seconds must be 0..{limits.MAX_WAIT_SECONDS}")
        self.url = url
        self.queues = list(queues)
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.worker_id = worker_id or default_worker_id()
        self.drain_timeout = drain_timeout
        self.complete_window = complete_window
        self.retry_base_seconds = retry_base_seconds
        self.retry_max_seconds = retry_max_seconds
        self.request_timeout = request_timeout
        self.on_result = on_result
        self._token = token
        self._rng = rng or random.Random()
        self._by_job: dict[str, Handler] = {}
        self._by_queue: dict[str, Handler] = {}
        self._default: Handler | None = None
        # The handlers that support dry-run mode: (by job?, key), and the default's flag.
        self._dry_run_keys: set[tuple[bool, str]] = set()
        self._dry_run_default = False
        self._stop_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reset_state()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **settings: Any) -> Worker:
        """A worker configured by ``TICKWORK_URL``, ``TICKWORK_TOKEN`` and
        ``TICKWORK_QUEUES`` (comma-separated); keyword ``settings`` win over them."""
        env = os.environ if environ is None else environ
        url = settings.pop("url", None) or env.get("TICKWORK_URL")
        token = settings.pop("token", None) or env.get("TICKWORK_TOKEN")
        if not url:
            raise ValueError("no API URL: set TICKWORK_URL or pass url=")
        if not token:
            raise ValueError("no token: set TICKWORK_TOKEN or pass token=")
        if "queues" not in settings and env.get("TICKWORK_QUEUES"):
            settings["queues"] = [q.strip() for q in env["TICKWORK_QUEUES"].split(",") if q.strip()]
        return cls(url, token, **settings)

    # Handlers

    def handler(
        self, *, job: str | None = None, queue: str | None = None, dry_run: bool = False
    ) -> Callable[[HandlerT], HandlerT]:
        """Decorator: ``@worker.handler(job="export-invoices")``, ``@worker.handler(
        queue="billing")``, or ``@worker.handler()`` for the default handler.

        ``dry_run=True`` declares that the handler supports dry-run mode: it checks
        ``ctx.dry_run`` and, when set, only logs what it would do. The runs of a job in
        dry-run mode (``spec.dryRun: true``) go only to such handlers; any other handler
        is skipped for them (the run is completed as succeeded, untouched)."""

        def decorate(function: HandlerT) -> HandlerT:
            self.register(function, job=job, queue=queue, dry_run=dry_run)
            return function

        return decorate

    def register(
        self,
        function: Handler,
        *,
        job: str | None = None,
        queue: str | None = None,
        dry_run: bool = False,
    ) -> None:
        """Register ``function`` for one job, for one queue, or (neither) as the default;
        ``dry_run=True``: it supports dry-run mode (see ``handler``)."""
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

    # Running

    @property
    def in_flight(self) -> int:
        """Handlers running now."""
        return len(self._tasks)

    def run_forever(self, *, install_signal_handlers: bool = True) -> None:
        """Run in a new event loop until stopped (SIGTERM/SIGINT drain by default)."""
        asyncio.run(self.run(install_signal_handlers=install_signal_handlers))

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        """Lease and run until ``stop()`` (or a signal, when installed), then drain.

        Raises ``ApiError`` after draining if the API refused the lease call for good
        (401, 403, 400).
        """
        if self._loop is not None:
            raise RuntimeError("this worker is already running")
        loop = asyncio.get_running_loop()
        self._reset_state()
        self._loop = loop
        if self._stop_requested:
            self._stop_event.set()
        executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tickwork-handler")
        self._executor = executor
        installed = self._install_signal_handlers(loop) if install_signal_handlers else []
        client = WorkerClient(self.url, self._token, request_timeout=self.request_timeout)
        beating = asyncio.create_task(
            self._supervised("heartbeat", self._heartbeat_loop, client), name="tickwork-heartbeat"
        )
        completing = asyncio.create_task(
            self._supervised("complete", self._complete_loop, client), name="tickwork-complete"
        )
        refused: ApiError | None = None
        log.info(
            "worker %s leasing from %s (queues %s, concurrency %d)",
            self.worker_id,
            self.url,
            ",".join(self.queues),
            self.concurrency,
            extra={"action": "start"},
        )
        try:
            refused = await self._lease_loop(client)
            await self._drain()
            await self._flush_completions()
        finally:
            for task in self._tasks:
                task.cancel()
            beating.cancel()
            completing.cancel()
            await asyncio.gather(*self._tasks, beating, completing, return_exceptions=True)
            await client.close()
            for sig in installed:
                loop.remove_signal_handler(sig)
            executor.shutdown(wait=False, cancel_futures=True)
            self._loop = None
            self._stop_requested = False
            log.info("worker %s stopped", self.worker_id, extra={"action": "stopped"})
        if refused is not None:
            raise refused

    def stop(self, *, force: bool = False) -> None:
        """Stop leasing, let running handlers finish (up to ``drain_timeout``), report
        their outcomes, then return from ``run()``.

        A lease call already waiting is let finish (up to ``wait_seconds``) and its runs
        are run too: abandoning it could strand runs it already claimed until their
        leases run out. ``force=True`` cancels the pending lease call and the handlers
        at once. Safe to call from any thread, and before ``run()``."""
        loop = self._loop
        if loop is None:
            self._stop_requested = True
            return
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            self._stop(force)
        else:
            loop.call_soon_threadsafe(self._stop, force)

    def _stop(self, force: bool) -> None:
        if not self._stop_event.is_set():
            polling = self._lease_call is not None and not self._lease_call.done()
            log.info(
                "worker %s stopping: draining %d run(s)%s",
                self.worker_id,
                len(self._tasks),
                f", after the pending lease call (up to {self.wait_seconds:g}s)" if polling else "",
                extra={"action": "drain"},
            )
        if not self._stop_event.is_set():
            self._stopped_at = asyncio.get_running_loop().time()
        self._stop_event.set()
        self._slot_freed.set()
        if force and not self._abort_event.is_set():
            log.warning(
                "worker %s stopping now: cancelling handlers",
                self.worker_id,
                extra={"action": "abort"},
            )
            self._abort_event.set()
            if self._lease_call is not None:
                self._lease_call.cancel()
            for task in self._tasks:
                task.cancel()

    def _install_signal_handlers(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        installed: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread, or a platform without loop signals
            installed.append(sig)
        return installed

    def _on_signal(self, sig: int) -> None:
        # The first signal drains; a second one stops at once.
        force = self._stop_event.is_set()
        log.info("received %s", signal.Signals(sig).name, extra={"action": "signal"})
        self._stop(force)

    def _reset_state(self) -> None:
        """Fresh state for one ``run()``."""
        self._stop_event = asyncio.Event()
        self._abort_event = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._beat_wakeup = asyncio.Event()
        self._complete_wakeup = asyncio.Event()
        self._completions_idle = asyncio.Event()
        self._completions_idle.set()
        self._tasks = set()
        self._held = {}
        self._pending = []
        self._lease_call = None
        self._executor = None
        self._stopped_at = None

    async def _supervised(
        self, name: str, loop: Callable[[WorkerClient], Awaitable[None]], client: WorkerClient
    ) -> None:
        """Run a background loop for as long as the worker runs: a loop that dies
        would silently cost every held lease, so a failure is logged and the loop
        started again after a backoff."""
        backoff = Backoff(self.retry_base_seconds, self.retry_max_seconds, self._rng)
        while True:
            try:
                await loop(client)
            except Exception:
                delay = backoff.next_delay()
                log.exception(
                    "the %s loop failed; restarting it in %.2fs",
                    name,
                    delay,
                    extra={"action": "loop-restart", "call": name},
                )
                await asyncio.sleep(delay)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, returning early when the worker is asked to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_event.wait(), seconds)

    # The lease loop

    async def _lease_loop(self, client: WorkerClient) -> ApiError | None:
        backoff = Backoff(self.retry_base_seconds, self.retry_max_seconds, self._rng)
        while not self._stop_event.is_set():
            free = self.concurrency - len(self._tasks)
            if free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            call = asyncio.create_task(
                client.lease(
                    self.queues,
                    max_runs=min(free, limits.MAX_LEASE_BATCH),
                    wait_seconds=self.wait_seconds,
                    lease_seconds=self.lease_seconds,
                    worker_id=self.worker_id,
                )
            )
            self._lease_call = call
            try:
                leases = await call
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                break  # stop(force=True) abandoned the long-poll
            except Exception as error:
                if not is_transient(error):
                    log.error(
                        "the API refused the lease call: %s",
                        error,
                        extra={"action": "lease-refused"},
                    )
                    if isinstance(error, ApiError):
                        return error
                    raise
                await self._sleep(self._retry_delay(backoff, "lease", error))
                continue
            finally:
                self._lease_call = None
            backoff.reset()
            for lease in leases:
                self._start(lease)
            if not leases and self.wait_seconds == 0:
                await self._sleep(1.0)
        return None

    def _retry_delay(self, backoff: Backoff, call: str, error: BaseException) -> float:
        delay = backoff.next_delay()
        log.warning(
            "%s call failed (%s); retry %d in %.2fs",
            call,
            error,
            backoff.failures,
            delay,
            extra={"action": "api-retry", "call": call, "retry": backoff.failures},
        )
        return delay

    def _start(self, lease: Lease) -> None:
        assert self._loop is not None
        context = RunContext(lease, self.worker_id)
        held = _Held(context, next_beat=self._loop.time() + self.lease_seconds / 3)
        self._held[context.run_id] = held
        task = asyncio.create_task(self._execute(held), name=f"tickwork-run-{context.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        self._beat_wakeup.set()
        log.debug(
            "leased %s (%s, attempt %d)",
            context.run_id,
            context.job,
            context.attempt,
            extra={"action": "leased", "run_id": context.run_id},
        )

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slot_freed.set()

    # Handlers

    async def _execute(self, held: _Held) -> None:
        context = held.context
        completion: Completion | None = None
        try:
            handler = self.handler_for(context.job, context.queue)
            if handler is None:
                log.error(
                    "no handler for job %r (queue %r)",
                    context.job,
                    context.queue,
                    extra={"action": "no-handler", "run_id": context.run_id},
                )
                completion = self._failure(
                    context, f"worker {self.worker_id} has no handler for job {context.job!r}"
                )
            elif context.dry_run and not self.supports_dry_run(context.job, context.queue):
                log.info(
                    "run %s of job %r is a dry run and its handler does not support dry "
                    "runs: skipped",
                    context.run_id,
                    context.job,
                    extra={"action": "dry-run-skipped", "run_id": context.run_id},
                )
                completion = Completion(context.run_id, context.fencing_token, "succeeded")
            else:
                await self._call(handler, context)
                completion = Completion(context.run_id, context.fencing_token, "succeeded")
        except NonRetryableError as error:
            _log_failure(context, error, "failed for good (not retryable)")
            completion = self._failure(context, _message(error), retryable=False)
        except asyncio.CancelledError:
            completion = self._failure(context, "worker stopped before the handler finished")
            raise
        except Exception as error:
            _log_failure(context, error, "failed")
            completion = self._failure(context, _message(error))
        finally:
            self._finish(held, completion)

    async def _call(self, handler: Handler, context: RunContext) -> None:
        # An async function, or an object whose __call__ is one.
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            type(handler).__call__
        ):
            result = handler(context)
        else:
            assert self._loop is not None
            call = functools.partial(contextvars.copy_context().run, handler, context)
            result = await self._loop.run_in_executor(self._executor, call)
        if inspect.isawaitable(result):
            await result

    @staticmethod
    def _failure(context: RunContext, message: str, retryable: bool = True) -> Completion:
        return Completion(context.run_id, context.fencing_token, "failed", message, retryable)

    def _finish(self, held: _Held, completion: Completion | None) -> None:
        context = held.context
        if completion is None or context.lost or self._held.get(context.run_id) is not held:
            self._held.pop(context.run_id, None)
            self._report(held, completion, dropped=True)
            return
        held.completion = completion
        self._pending.append(held)
        self._completions_idle.clear()
        self._complete_wakeup.set()

    def _report(
        self,
        held: _Held,
        completion: Completion | None,
        *,
        dropped: bool = False,
        state: str | None = None,
        problem: Problem | None = None,
    ) -> None:
        context = held.context
        if dropped:
            reason = "lease lost" if context.lost else "handler did not return"
            log.warning(
                "run %s: %s, outcome dropped",
                context.run_id,
                reason,
                extra={"action": "dropped", "run_id": context.run_id},
            )
        if self.on_result is None:
            return
        result = RunResult(
            run_id=context.run_id,
            job=context.job,
            attempt=context.attempt,
            outcome="dropped" if dropped or completion is None else completion.outcome,
            message=None if completion is None else completion.message,
            retryable=True if completion is None else completion.retryable,
            state=state,
            problem=problem,
        )
        try:
            self.on_result(result)
        except Exception:
            log.exception("on_result failed", extra={"action": "on-result-failed"})

    # Heartbeats

    async def _heartbeat_loop(self, client: WorkerClient) -> None:
        assert self._loop is not None
        interval = self.lease_seconds / 3
        # Runs due within `slack` are beaten together: one call for many runs.
        slack = interval / 3
        backoff = Backoff(self.retry_base_seconds, min(self.retry_max_seconds, interval), self._rng)
        while True:
            self._beat_wakeup.clear()
            now = self._loop.time()
            waiting = [h for h in self._held.values() if not h.completing]
            due = [h for h in waiting if h.next_beat <= now + slack]
            if due:
                step = limits.MAX_HEARTBEAT_BATCH
                for start in range(0, len(due), step):
                    await self._beat(client, due[start : start + step], interval, backoff)
                continue
            timeout = None
            if waiting:
                timeout = max(0.0, min(h.next_beat for h in waiting) - slack - now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat_wakeup.wait(), timeout)

    async def _beat(
        self, client: WorkerClient, held: list[_Held], interval: float, backoff: Backoff
    ) -> None:
        assert self._loop is not None
        sent_at = self._loop.time()
        beats = [Beat(h.context.run_id, h.context.fencing_token, self.lease_seconds) for h in held]
        try:
            answers = await client.heartbeat_many(beats)
        except Exception as error:
            if is_transient(error):
                delay = self._retry_delay(backoff, "heartbeat", error)
            else:
                log.error(
                    "the API refused a heartbeat: %s", error, extra={"action": "heartbeat-refused"}
                )
                delay = interval
            for h in held:
                h.next_beat = self._loop.time() + delay
            return
        backoff.reset()
        for h, answer in zip(held, answers, strict=True):
            context = h.context
            if self._held.get(context.run_id) is not h or h.completing:
                continue  # completed meanwhile: the completion's answer decides
            if isinstance(answer, Problem):
                if answer.lease_lost:
                    log.warning(
                        "run %s: lease lost (%s)",
                        context.run_id,
                        answer.detail,
                        extra={"action": "lease-lost", "run_id": context.run_id},
                    )
                    context._lose()
                    del self._held[context.run_id]
                    if h in self._pending:  # finished, completion not sent yet
                        self._pending.remove(h)
                        self._report(h, h.completion, dropped=True)
                else:
                    log.error(
                        "heartbeat of %s refused: %s",
                        context.run_id,
                        answer.detail,
                        extra={"action": "heartbeat-refused", "run_id": context.run_id},
                    )
                    h.next_beat = self._loop.time() + interval
                continue
            h.next_beat = sent_at + interval
            context.lease_expires_at = answer.lease_expires_at
            if answer.cancel_requested and not context.cancel_requested:
                log.info(
                    "run %s: cancel requested",
                    context.run_id,
                    extra={"action": "cancel-requested", "run_id": context.run_id},
                )
                context._request_cancel()
        self._check_idle()

    # Completions

    async def _complete_loop(self, client: WorkerClient) -> None:
        backoff = Backoff(self.retry_base_seconds, self.retry_max_seconds, self._rng)
        while True:
            await self._complete_wakeup.wait()
            if self.complete_window > 0:
                await asyncio.sleep(self.complete_window)  # let runs finishing together join
            self._complete_wakeup.clear()
            while self._pending:
                batch = self._pending[: limits.MAX_COMPLETE_BATCH]
                del self._pending[: limits.MAX_COMPLETE_BATCH]
                for h in batch:
                    h.completing = True
                try:
                    answers = await client.complete_many([_completion_of(h) for h in batch])
                except Exception as error:
                    for h in batch:
                        h.completing = False
                    self._beat_wakeup.set()
                    if is_transient(error):
                        self._pending[:0] = batch
                        delay = self._retry_delay(backoff, "complete", error)
                        if self._abort_event.is_set():
                            break
                        await asyncio.sleep(delay)
                        continue
                    log.error(
                        "the API refused %d completion(s): %s",
                        len(batch),
                        error,
                        extra={"action": "complete-refused"},
                    )
                    problem = error.problem if isinstance(error, ApiError) else None
                    for h in batch:
                        self._held.pop(h.context.run_id, None)
                        self._report(h, h.completion, problem=problem)
                    continue
                backoff.reset()
                for h, answer in zip(batch, answers, strict=True):
                    self._settle(h, answer)
            self._check_idle()

    def _settle(self, held: _Held, answer: Completed | Problem) -> None:
        context = held.context
        self._held.pop(context.run_id, None)
        if isinstance(answer, Problem):
            if answer.lease_lost:
                context._lose()
                log.warning(
                    "completion of %s refused: lease lost (%s)",
                    context.run_id,
                    answer.detail,
                    extra={"action": "dropped", "run_id": context.run_id},
                )
            else:
                log.error(
                    "completion of %s refused: %s",
                    context.run_id,
                    answer.detail,
                    extra={"action": "complete-refused", "run_id": context.run_id},
                )
            self._report(held, held.completion, problem=answer)
            return
        log.debug(
            "run %s %s",
            context.run_id,
            answer.state,
            extra={"action": answer.state, "run_id": context.run_id},
        )
        self._report(held, held.completion, state=answer.state)

    def _check_idle(self) -> None:
        if not self._pending and not any(h.completing for h in self._held.values()):
            self._completions_idle.set()

    # Draining

    async def _drain(self) -> None:
        if not self._tasks:
            return
        loop = asyncio.get_running_loop()
        deadline = (self._stopped_at or loop.time()) + self.drain_timeout
        aborted = asyncio.create_task(self._abort_event.wait())
        try:
            while self._tasks and not aborted.done():
                left = deadline - loop.time()
                if left <= 0:
                    break
                await asyncio.wait(
                    {*self._tasks, aborted}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
        finally:
            aborted.cancel()
        if self._tasks:
            log.warning(
                "drain timeout: cancelling %d handler(s)",
                len(self._tasks),
                extra={"action": "drain-timeout"},
            )
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _flush_completions(self) -> None:
        self._check_idle()
        timeout = 0.5 if self._abort_event.is_set() else COMPLETION_GRACE_SECONDS
        try:
            await asyncio.wait_for(self._completions_idle.wait(), timeout)
        except TimeoutError:
            log.warning(
                "%d completion(s) not delivered; their leases will expire",
                len(self._pending) + sum(h.completing for h in self._held.values()),
                extra={"action": "undelivered"},
            )


def _completion_of(held: _Held) -> Completion:
    assert held.completion is not None, "only finished runs wait for completion"
    return held.completion


def _log_failure(context: RunContext, error: BaseException, what: str) -> None:
    """One line per failed attempt: a handler that raises is the expected way to fail a
    run, and a traceback per retry would bury everything else. The traceback is there at
    DEBUG for whoever debugs the handler."""
    extra = {"action": "failed", "run_id": context.run_id}
    log.warning(
        "run %s (%s, attempt %d) %s: %s",
        context.run_id,
        context.job,
        context.attempt,
        what,
        _message(error),
        extra=extra,
    )
    if log.isEnabledFor(logging.DEBUG):
        log.debug("run %s: the handler raised", context.run_id, exc_info=error, extra=extra)


def _message(error: BaseException) -> str:
    text = str(error)
    message = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return message[:MAX_MESSAGE]


def run(
    handlers: Mapping[str, Handler] | Handler,
    *,
    install_signal_handlers: bool = True,
    **settings: Any,
) -> None:
    """Run a worker from a script until SIGTERM/SIGINT.

    ``handlers`` maps job names to handlers, or is one handler for every run. Settings
    are ``Worker``'s keyword arguments; ``url``, ``token`` and ``queues`` default to
    ``TICKWORK_URL``, ``TICKWORK_TOKEN`` and ``TICKWORK_QUEUES``.
    """
    worker = Worker.from_env(**settings)
    if isinstance(handlers, Mapping):
        for job, function in handlers.items():
            worker.register(function, job=job)
    else:
        worker.register(handlers)
    worker.run_forever(install_signal_handlers=install_signal_handlers)
