"""The Worker: lease runs, run their handlers concurrently, heartbeat, complete, drain.

Three loops share one HTTP session and one ``Session`` of state:

- the lease loop (``leasing``) long-polls ``POST /v1/lease`` for as many runs as there
  are free handler slots, and starts one asyncio task per run (``execution``);
- the heartbeat loop (``heartbeats``) extends every held lease at a third of its
  length, in batches, and passes ``cancelRequested`` and lost leases on to the
  handlers' contexts;
- the completion loop (``completions``) reports outcomes in batches, collecting for a
  few milliseconds so runs that finish together share a call.

``stop()`` (or SIGTERM) drains (``draining``). Connection errors, 5xx and 429 are
retried with full-jitter backoff (``core.backoff``); any other error answer to a lease
call (a bad token, a queue the token may not lease) stops the worker after draining.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from tickwork.core.backoff import Backoff
from tickwork.worker import completions, credentials, draining, heartbeats, leasing
from tickwork.worker.client import ApiError, WorkerClient
from tickwork.worker.handlers import Handler, Handlers, HandlerT
from tickwork.worker.results import OnResult
from tickwork.worker.session import Session, WorkerSignals
from tickwork.worker.settings import WorkerSettings
from tickwork.worker.threads import HandlerThreads

log: Final = logging.getLogger("tickwork.worker")


class Worker:
    """Leases runs of ``queues`` and runs their handlers, up to ``concurrency`` at once.

    Register handlers per job, per queue, or as the default (job beats queue beats
    default), then ``await worker.run()`` or call ``worker.run_forever()``.

    ``url`` is the tickwork API (``http://tickwork:8080``), ``token`` the worker's
    bearer token, or a ``TokenFile`` that is read again as it rotates (a projected
    ServiceAccount token). The settings (``WorkerSettings``: ``queues``, ``concurrency``,
    ``lease_seconds``, ...) come as a ``settings`` object, as keyword arguments, or both
    (the keywords win). ``on_result`` is called on the event loop with a ``RunResult``
    for each run.
    """

    def __init__(
        self,
        url: str,
        token: credentials.Token,
        *,
        settings: WorkerSettings | None = None,
        on_result: OnResult | None = None,
        rng: random.Random | None = None,
        **fields: Any,
    ) -> None:
        if settings is None:
            settings = WorkerSettings(**fields)
        elif fields:
            settings = WorkerSettings.model_validate(settings.model_dump() | fields)
        self.url = url
        self.settings = settings
        self.on_result = on_result
        self.test_signals = WorkerSignals()
        self._token = token
        self._rng = rng or random.Random()
        self._handlers = Handlers()
        self._stop_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Session | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **settings: Any) -> Worker:
        """A worker configured by ``TICKWORK_URL``, ``TICKWORK_TOKEN`` (or
        ``TICKWORK_TOKEN_FILE``, a file read again as it rotates) and ``TICKWORK_QUEUES``
        (comma-separated); keyword ``settings`` win over them."""
        env = os.environ if environ is None else environ
        url = settings.pop("url", None) or env.get("TICKWORK_URL")
        token: credentials.Token | None = settings.pop("token", None)
        if not url:
            raise ValueError("no API URL: set TICKWORK_URL or pass url=")
        if token is None:
            token = credentials.from_env(env)
        if "queues" not in settings and env.get("TICKWORK_QUEUES"):
            settings["queues"] = [q.strip() for q in env["TICKWORK_QUEUES"].split(",") if q.strip()]
        return cls(url, token, **settings)

    @property
    def queues(self) -> list[str]:
        return list(self.settings.queues)

    @property
    def concurrency(self) -> int:
        return self.settings.concurrency

    @property
    def worker_id(self) -> str:
        return self.settings.worker_id

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
        self._handlers.register(function, job=job, queue=queue, dry_run=dry_run)

    def handler_for(self, job: str, queue: str) -> Handler | None:
        """The handler of a run: the job's, else the queue's, else the default."""
        return self._handlers.handler_for(job, queue)

    def supports_dry_run(self, job: str, queue: str) -> bool:
        """Whether the handler of ``job``/``queue`` was registered with ``dry_run=True``."""
        return self._handlers.supports_dry_run(job, queue)

    # Running

    @property
    def in_flight(self) -> int:
        """Handlers running now."""
        return 0 if self._session is None else self._session.running

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
        settings = self.settings
        threads = HandlerThreads(loop, settings.concurrency)
        client = WorkerClient(self.url, self._token, request_timeout=settings.request_timeout)
        session = Session(
            settings,
            self._handlers,
            client,
            loop,
            threads,
            self.on_result,
            self.test_signals,
            self._rng,
        )
        self._session = session
        self._loop = loop
        if self._stop_requested:
            session.stopping.set()
        installed = self._install_signal_handlers(loop) if install_signal_handlers else []
        beating = asyncio.create_task(
            self._supervised("heartbeat", heartbeats.heartbeat_loop, session),
            name="tickwork-heartbeat",
        )
        completing = asyncio.create_task(
            self._supervised("complete", completions.complete_loop, session),
            name="tickwork-complete",
        )
        refused: ApiError | None = None
        log.info(
            "worker %s leasing from %s (queues %s, concurrency %d)",
            settings.worker_id,
            self.url,
            ",".join(settings.queues),
            settings.concurrency,
            extra={"action": "start"},
        )
        try:
            refused = await leasing.lease_loop(session)
            await draining.drain(session)
            await draining.flush_completions(session)
        finally:
            for task in session.tasks:
                task.cancel()
            beating.cancel()
            completing.cancel()
            await asyncio.gather(*session.tasks, beating, completing, return_exceptions=True)
            await client.close()
            for sig in installed:
                loop.remove_signal_handler(sig)
            threads.close()
            self._loop = None
            self._stop_requested = False
            log.info("worker %s stopped", settings.worker_id, extra={"action": "stopped"})
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
        session = self._session
        if session is None or self._loop is None:
            return
        if not session.stopping.is_set():
            call = session.lease_call
            polling = call is not None and not call.done()
            log.info(
                "worker %s stopping: draining %d run(s)%s",
                self.settings.worker_id,
                session.running,
                f", after the pending lease call (up to {self.settings.wait_seconds:g}s)"
                if polling
                else "",
                extra={"action": "drain"},
            )
            session.stopped_at = asyncio.get_running_loop().time()
        session.stopping.set()
        session.slot_freed.set()
        if force and not session.aborting.is_set():
            log.warning(
                "worker %s stopping now: cancelling handlers",
                self.settings.worker_id,
                extra={"action": "abort"},
            )
            session.aborting.set()
            if session.lease_call is not None:
                session.lease_call.cancel()
            for task in session.tasks:
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
        force = self._session is not None and self._session.stopping.is_set()
        log.info("received %s", signal.Signals(sig).name, extra={"action": "signal"})
        self._stop(force)

    async def _supervised(
        self, name: str, loop: Callable[[Session], Awaitable[None]], session: Session
    ) -> None:
        """Run a background loop for as long as the worker runs: a loop that dies
        would silently cost every held lease, so a failure is logged and the loop
        started again after a backoff."""
        settings = self.settings
        backoff = Backoff(settings.retry_base_seconds, settings.retry_max_seconds, self._rng)
        while True:
            try:
                await loop(session)
            except Exception:
                delay = backoff.next_delay()
                log.exception(
                    "the %s loop failed; restarting it in %.2fs",
                    name,
                    delay,
                    extra={"action": "loop-restart", "call": name},
                )
                await asyncio.sleep(delay)


def run(
    handlers: Mapping[str, Handler] | Handler,
    *,
    install_signal_handlers: bool = True,
    **settings: Any,
) -> None:
    """Run a worker from a script until SIGTERM/SIGINT.

    ``handlers`` maps job names to handlers, or is one handler for every run. Settings
    are ``Worker``'s keyword arguments; ``url``, ``token`` and ``queues`` default to
    ``TICKWORK_URL``, ``TICKWORK_TOKEN`` (or ``TICKWORK_TOKEN_FILE``) and
    ``TICKWORK_QUEUES``.
    """
    worker = Worker.from_env(**settings)
    if isinstance(handlers, Mapping):
        for job, function in handlers.items():
            worker.register(function, job=job)
    else:
        worker.register(handlers)
    worker.run_forever(install_signal_handlers=install_signal_handlers)
