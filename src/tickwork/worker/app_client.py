"""What a team's application asks of tickwork: enqueue runs, read them, cancel them.

``Client`` (blocking) and ``AsyncClient`` (asyncio) make the same calls over httpx with
the same rules; the public import path is ``tickwork.client``. How a call is written
and how its answer is read is one piece of code (``_Call``); the two clients differ
only in how they send it and how they wait between tries.

Retries: a call that got no answer (connection refused or reset, timeout) or was
answered 408, 429, 502, 503 or 504 is repeated, at most ``retries`` times, after a
full-jitter backoff, and never before what the answer's ``Retry-After`` asked (an
answer asking for more than ``max_retry_after`` seconds is raised at once). Every call
is safe to repeat: reads change nothing, a cancel of a cancelled run answers it
unchanged, and every enqueue carries an idempotency key, the caller's or one made up
here, so a repeated enqueue answers the run the first one made instead of making a
second. Any other error answer is raised as the ``ApiError`` subclass of its problem.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import os
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Generic, TypeVar
from urllib.parse import quote

import httpx
import orjson
import pydantic_core

from tickwork.core import backoff, limits
from tickwork.core.records import State
from tickwork.worker import credentials
from tickwork.worker.client import parse_instant
from tickwork.worker.problems import ApiError, ApiUnreachable, Problem, answer_object

log: Final = logging.getLogger("tickwork.client")

_T = TypeVar("_T")

# Statuses answered before anything was done, or by a proxy in front of the API: the
# same call may well pass a moment later.
RETRIED_STATUSES: Final = frozenset({408, 429, 502, 503, 504})

DEFAULT_RETRIES: Final = 4
DEFAULT_RETRY_BASE_SECONDS: Final = 0.5
DEFAULT_RETRY_MAX_SECONDS: Final = 10.0
DEFAULT_MAX_RETRY_AFTER: Final = 60.0


# ---------------------------------------------------------------------------------------
# What the calls answer.


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a run (``Run.attempts``): the one in flight has ``finished_at``
    and ``outcome`` None."""

    attempt: int
    worker_id: str | None
    leased_at: datetime | None
    finished_at: datetime | None
    outcome: str | None
    error: Any

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> Attempt:
        return cls(
            attempt=int(item["attempt"]),
            worker_id=item.get("workerId"),
            leased_at=parse_instant(item.get("leasedAt")),
            finished_at=parse_instant(item.get("finishedAt")),
            outcome=item.get("outcome"),
            error=item.get("error"),
        )


@dataclass(frozen=True, slots=True)
class Run:
    """A run, as the API shows it (``docs/http-api.md``, Resources).

    ``attempts`` is filled by ``get_run`` only (None elsewhere). ``created`` is set by
    ``enqueue`` only: True when this call made the run, False when an earlier call with
    the same idempotency key had (the run answered is that one). ``deduplicated`` and
    ``debounced`` are set on the answer to an enqueue that the job's ``unique`` or
    ``debounce`` rule answered with a run it had (docs/flow-control.md).
    """

    run_id: str
    job: str
    tenant: str
    queue: str
    priority: str
    state: State
    attempt: int
    max_attempts: int
    due_at: datetime | None
    ready_at: datetime | None
    idempotency_key: str
    payload: Any
    last_error: Any
    cancel_requested: bool
    created_at: datetime | None
    finished_at: datetime | None
    attempts: tuple[Attempt, ...] | None = None
    created: bool | None = None
    deduplicated: bool = False
    debounced: bool = False

    @property
    def finished(self) -> bool:
        """The run is over: succeeded, dead, cancelled, discarded or skipped."""
        return self.state.terminal

    @classmethod
    def from_json(cls, item: Mapping[str, Any], *, created: bool | None = None) -> Run:
        attempts = item.get("attempts")
        return cls(
            run_id=str(item["runId"]),
            job=str(item["job"]),
            tenant=str(item["tenant"]),
            queue=str(item["queue"]),
            priority=str(item["priority"]),
            state=State(item["state"]),
            attempt=int(item["attempt"]),
            max_attempts=int(item["maxAttempts"]),
            due_at=parse_instant(item.get("dueAt")),
            ready_at=parse_instant(item.get("readyAt")),
            idempotency_key=str(item.get("idempotencyKey") or ""),
            payload=item.get("payload"),
            last_error=item.get("lastError"),
            cancel_requested=bool(item.get("cancelRequested", False)),
            created_at=parse_instant(item.get("createdAt")),
            finished_at=parse_instant(item.get("finishedAt")),
            attempts=None if attempts is None else tuple(Attempt.from_json(a) for a in attempts),
            created=created,
            deduplicated=item.get("deduplicated") is True,
            debounced=item.get("debounced") is True,
        )


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of a job's runs, newest first; ``next_cursor`` is None on the last."""

    items: list[Run]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run of a batch enqueue (``enqueue_many``): its payload (None: the job's),
    when it runs (``run_at`` or ``delay``, or now), and its idempotency key (made up
    when not given, so the batch can be repeated safely)."""

    payload: Any = None
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    idempotency_key: str | None = None


BatchResult = Run | ApiError
"""One item of ``enqueue_many``'s answer: the run, or the item's problem (not raised)."""


# ---------------------------------------------------------------------------------------
# Writing calls and reading their answers: the same for both clients.


@dataclass(frozen=True, slots=True)
class _Call(Generic[_T]):
    """One API call: what is sent, and how a 2xx answer is read."""

    name: str
    method: str
    path: str
    read: Callable[[int, Any], _T]
    params: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()


def _encode(value: Any) -> bytes:
    # Models, dataclasses, datetimes and enums as pydantic writes them to JSON.
    return orjson.dumps(
        value, default=pydantic_core.to_jsonable_python, option=orjson.OPT_NON_STR_KEYS
    )


def _instant(value: datetime, name: str) -> str:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime (with a time zone), not {value}")
    return value.isoformat()


def _seconds(value: float | timedelta, name: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"{name} must be a finite number of seconds, not {value}")
    return seconds


def _when(body: dict[str, Any], run_at: datetime | None, delay: float | timedelta | None) -> None:
    if run_at is not None and delay is not None:
        raise ValueError("give at most one of run_at and delay")
    if run_at is not None:
        body["runAt"] = _instant(run_at, "run_at")
    if delay is not None:
        body["delaySeconds"] = _seconds(delay, "delay")


def new_idempotency_key() -> str:
    """A key for an enqueue whose caller gave none: unique, so that only a repeat of
    the same call can meet it."""
    return f"client-{uuid.uuid4().hex}"


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(part, safe="") for part in parts)


def _job(job: str) -> str:
    if not job:
        raise ValueError("a job name is required")
    return job


class _Calls:
    """The calls of the API a client makes, written out (no I/O)."""

    def __init__(self, tenant: str | None) -> None:
        self.tenant = tenant

    def _tenant(self) -> tuple[tuple[str, str], ...]:
        return (("tenant", self.tenant),) if self.tenant else ()

    def enqueue(
        self,
        job: str,
        payload: Any,
        run_at: datetime | None,
        delay: float | timedelta | None,
        idempotency_key: str | None,
        priority: str | None,
        if_not_running: bool,
    ) -> _Call[Run]:
        body: dict[str, Any] = {}
        if payload is not None:
            body["payload"] = payload
        _when(body, run_at, delay)
        if priority is not None:
            body["priority"] = str(priority)
        if if_not_running:
            body["ifNotRunning"] = True
        generated = idempotency_key is None
        key = new_idempotency_key() if idempotency_key is None else idempotency_key

        def read(status: int, answer: Any) -> Run:
            # A made-up key is this call's own: an earlier try of it made the run, unless
            # the job's rule answered with a run another enqueue made.
            by_rule = answer.get("deduplicated") is True or answer.get("debounced") is True
            return Run.from_json(answer, created=status == 201 or (generated and not by_rule))

        return _Call(
            "enqueue",
            "POST",
            _path("v1", "jobs", _job(job), "runs"),
            read,
            self._tenant(),
            _encode(body),
            (("Idempotency-Key", key),),
        )

    def enqueue_many(self, job: str, runs: Iterable[RunRequest]) -> _Call[list[BatchResult]]:
        items = []
        for run in runs:
            item: dict[str, Any] = {}
            if run.payload is not None:
                item["payload"] = run.payload
            _when(item, run.run_at, run.delay)
            item["idempotencyKey"] = run.idempotency_key or new_idempotency_key()
            items.append(item)
        if len(items) > limits.MAX_ENQUEUE_BATCH:
            raise ValueError(
                f"a batch holds up to {limits.MAX_ENQUEUE_BATCH} runs, not {len(items)}"
            )
        count = len(items)

        def read(status: int, answer: Any) -> list[BatchResult]:
            found = answer.get("items") if isinstance(answer, dict) else None
            if not isinstance(found, list) or len(found) != count:
                raise ApiError(Problem.unparsed(status, f"expected {count} items in the answer"))
            return [_batch_item(item) for item in found]

        return _Call(
            "enqueue_many",
            "POST",
            _path("v1", "jobs", _job(job), "runs:batch"),
            read,
            self._tenant(),
            _encode({"runs": items}),
        )

    def get_run(self, run_id: str) -> _Call[Run]:
        return _Call("get_run", "GET", _path("v1", "runs", run_id), _run)

    def cancel(self, run_id: str) -> _Call[Run]:
        return _Call("cancel", "POST", _path("v1", "runs", run_id) + ":cancel", _run)

    def runs_page(
        self, job: str, state: State | str | None, cursor: str | None, limit: int | None
    ) -> _Call[RunPage]:
        params = list(self._tenant())
        if state is not None:
            params.append(("state", str(state)))
        if cursor is not None:
            params.append(("cursor", cursor))
        if limit is not None:
            params.append(("limit", str(limit)))
        return _Call(
            "list_runs", "GET", _path("v1", "jobs", _job(job), "runs"), _page, tuple(params)
        )


def _run(status: int, answer: Any) -> Run:
    return Run.from_json(answer)


def _page(status: int, answer: Any) -> RunPage:
    return RunPage(
        items=[Run.from_json(item) for item in answer.get("items", ())],
        next_cursor=answer.get("nextCursor") or None,
    )


def _batch_item(item: Any) -> BatchResult:
    if isinstance(item, dict) and "problem" in item:
        return ApiError.of(Problem.from_json(item["problem"]))
    return Run.from_json(item)


def _read(call: _Call[_T], response: httpx.Response) -> _T:
    """The call's result from a 2xx answer; the ``ApiError`` of any other."""
    status, raw = response.status_code, response.content
    if not 200 <= status < 300:
        raise ApiError.of(
            Problem.of_answer(status, raw),
            retry_after=retry_after(response.headers.get("Retry-After")),
        )
    return call.read(status, answer_object(status, raw, "the answer is not a JSON object"))


def retry_after(value: str | None, now: Callable[[], datetime] | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or (lambda: datetime.now(UTC)))()).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


@dataclass(frozen=True, slots=True)
class _Retries:
    """Which failures are tried again, and after how long."""

    retries: int
    base_seconds: float
    max_seconds: float
    max_retry_after: float
    rng: random.Random

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError("retries must be 0 or more")

    def delay(self, retry: int, error: ApiError | ApiUnreachable) -> float | None:
        """Seconds to wait before try ``retry`` + 1 after ``error``; None: raise it."""
        if retry > self.retries:
            return None
        asked = 0.0
        if isinstance(error, ApiError):
            if error.status not in RETRIED_STATUSES:
                return None
            if error.retry_after is not None:
                if error.retry_after > self.max_retry_after:
                    return None
                asked = error.retry_after
        # On top of what the server asked: clients refused together come back spread.
        jitter = backoff.delay(retry, self.base_seconds, self.max_seconds, self.rng)
        return asked + jitter.total_seconds()


def _log_retry(call: _Call[Any], retry: int, delay: float, error: BaseException) -> None:
    log.warning(
        "%s: %s; try %d in %.2fs",
        call.name,
        error,
        retry + 1,
        delay,
        extra={"action": "client-retry", "call": call.name, "retry": retry},
    )


def _unreachable(url: str, error: httpx.TransportError) -> ApiUnreachable:
    reason = "no answer in time" if isinstance(error, httpx.TimeoutException) else error
    failure = ApiUnreachable(f"{url}: {reason or type(error).__name__}")
    failure.__cause__ = error
    return failure


def _never_sent(error: httpx.TransportError) -> bool:
    """A mistake of the caller's (a URL without a scheme), not a network failure."""
    return isinstance(error, httpx.UnsupportedProtocol | httpx.LocalProtocolError)


# ---------------------------------------------------------------------------------------
# The clients.


_Sleep = TypeVar("_Sleep", Callable[[float], object], Callable[[float], Awaitable[object]])
_Http = TypeVar("_Http", httpx.Client, httpx.AsyncClient)


class _Base(Generic[_Sleep, _Http]):
    def __init__(
        self,
        url: str,
        token: credentials.Token,
        *,
        tenant: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        retries: int = DEFAULT_RETRIES,
        retry_base_seconds: float = DEFAULT_RETRY_BASE_SECONDS,
        retry_max_seconds: float = DEFAULT_RETRY_MAX_SECONDS,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        sleep: _Sleep | None = None,
        rng: random.Random | None = None,
        user_agent: str = "tickwork-client",
    ) -> None:
        if not url:
            raise ValueError("no API URL")
        self.url = url.rstrip("/")
        self.tenant = tenant
        self._token = token
        self._calls = _Calls(tenant)
        self._retries = _Retries(
            retries, retry_base_seconds, retry_max_seconds, max_retry_after, rng or random.Random()
        )
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._user_agent = user_agent
        self._sleep: _Sleep = self._default_sleep() if sleep is None else sleep
        self._http: _Http | None = None
        # Threads sharing a blocking client open its one pool once.
        self._opening = threading.Lock()

    def _default_sleep(self) -> _Sleep:
        raise NotImplementedError

    def _request(self, call: _Call[Any]) -> dict[str, Any]:
        headers = {
            "Authorization": f"Bearer {credentials.current(self._token)}",
            "Accept": "application/json",
            **dict(call.headers),
        }
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        return {
            "method": call.method,
            "url": self.url + call.path,
            "params": call.params,
            "content": call.body,
            "headers": headers,
        }

    def _delay(self, call: _Call[Any], retry: int, failure: ApiError | ApiUnreachable) -> float:
        """Seconds to wait before try ``retry`` + 1 of ``call`` (logged); ``failure``
        raised when it is not tried again."""
        delay = self._retries.delay(retry, failure)
        if delay is None:
            raise failure
        _log_retry(call, retry, delay, failure)
        return delay

    def _refreshed(self, response: httpx.Response) -> bool:
        """Refused with a token rotated since it was read: the file's new token."""
        token = self._token
        return (
            response.status_code == 401
            and isinstance(token, credentials.TokenFile)
            and token.refresh()
        )


def _environment(
    environ: Mapping[str, str] | None, options: dict[str, Any]
) -> tuple[str, credentials.Token]:
    env = os.environ if environ is None else environ
    url = options.pop("url", None) or env.get("TICKWORK_URL")
    if not url:
        raise ValueError("no API URL: set TICKWORK_URL or pass url=")
    token: credentials.Token | None = options.pop("token", None)
    if token is None:
        token = credentials.from_env(env)
    if "tenant" not in options and env.get("TICKWORK_TENANT"):
        options["tenant"] = env["TICKWORK_TENANT"]
    return url, token


class Client(_Base[Callable[[float], object], httpx.Client]):
    """A blocking client of the API, for a team's application: enqueue runs, read and
    cancel them. One keep-alive connection pool; use as a context manager or call
    ``close()``. Safe to share between threads.

    ``token`` is a bearer token, or a ``TokenFile`` read again as it rotates (a
    projected ServiceAccount token): a call refused with 401 is repeated once when
    the file holds a new token. ``tenant`` acts for that tenant (admin tokens only).
    ``timeout`` bounds each try of a call (``connect_timeout`` its connecting). Failed
    calls are retried as the module says: ``retries`` times at most, after a
    full-jitter backoff from ``retry_base_seconds`` doubling to ``retry_max_seconds``,
    and never sooner than a ``Retry-After`` of up to ``max_retry_after`` seconds.
    ``sleep`` (``time.sleep`` by default) and ``rng`` are how it waits and draws
    (tests give their own).
    """

    def _default_sleep(self) -> Callable[[float], object]:
        return time.sleep

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Client:
        """A client of ``TICKWORK_URL`` with ``TICKWORK_TOKEN`` (or a ``TokenFile`` of
        ``TICKWORK_TOKEN_FILE``) and, if set, ``TICKWORK_TENANT``; keyword ``options``
        (``Client``'s, ``url`` and ``token`` included) win over them."""
        url, token = _environment(environ, options)
        return cls(url, token, **options)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def enqueue(
        self,
        job: str,
        payload: Any = None,
        *,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        idempotency_key: str | None = None,
        priority: str | None = None,
        if_not_running: bool = False,
    ) -> Run:
        """Enqueue a run of ``job``: now, at ``run_at`` (an aware datetime), or after
        ``delay`` (seconds or a ``timedelta``).

        ``payload`` (any JSON value, or a pydantic model or dataclass, written as JSON)
        replaces the job's payload for this run; None keeps the job's. ``priority``
        (``critical``, ``default``, ``bulk``) replaces the job's. ``if_not_running``:
        refused with ``ConcurrencyLimit`` while the job is at its concurrency limit.
        ``idempotency_key``: a second enqueue with the same key and the same request
        answers the first run (``created`` False), with another request it is refused
        with ``IdempotencyKeyReused``; without one, a key is made up for this call, so
        its retries cannot enqueue twice.
        """
        return self._call(
            self._calls.enqueue(
                job, payload, run_at, delay, idempotency_key, priority, if_not_running
            )
        )

    def enqueue_many(self, job: str, runs: Iterable[RunRequest]) -> list[BatchResult]:
        """Enqueue up to 1 000 runs of ``job`` in one call: one ``Run``, or the item's
        ``ApiError`` (returned, not raised), per request, in order. Items without an
        idempotency key get one made up, so the call can be retried safely."""
        requests = list(runs)
        if not requests:
            return []
        return self._call(self._calls.enqueue_many(job, requests))

    def get_run(self, run_id: str) -> Run:
        """The run with its ``attempts``; ``NotFound`` if there is none (or it is
        another tenant's)."""
        return self._call(self._calls.get_run(run_id))

    def cancel(self, run_id: str) -> Run:
        """Cancel a run: a pending one ends ``cancelled``, a leased one is asked to stop
        (``cancel_requested``). ``InvalidState`` if it has already finished otherwise."""
        return self._call(self._calls.cancel(run_id))

    def runs_page(
        self,
        job: str,
        *,
        state: State | str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> RunPage:
        """One page of ``job``'s runs, newest first (``limit`` 1 to 500, default 50);
        pass its ``next_cursor`` as ``cursor`` for the next page."""
        return self._call(self._calls.runs_page(job, state, cursor, limit))

    def list_runs(
        self, job: str, *, state: State | str | None = None, page_size: int | None = None
    ) -> Iterator[Run]:
        """Every run of ``job`` (only those in ``state``, if given), newest first, page
        by page as the iteration goes."""
        cursor: str | None = None
        while True:
            page = self.runs_page(job, state=state, cursor=cursor, limit=page_size)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def _client(self) -> httpx.Client:
        http = self._http
        if http is None:
            with self._opening:  # threads sharing the client share one pool
                http = self._http
                if http is None:
                    http = self._http = httpx.Client(
                        timeout=self._timeout, headers={"User-Agent": self._user_agent}
                    )
        return http

    def _call(self, call: _Call[_T]) -> _T:
        retry = 0
        refreshed = False
        while True:
            request = self._request(call)
            try:
                response = self._client().request(**request)
            except httpx.TransportError as error:
                if _never_sent(error):
                    raise
                failure: ApiError | ApiUnreachable = _unreachable(request["url"], error)
            else:
                if not refreshed and self._refreshed(response):
                    refreshed = True
                    continue
                try:
                    return _read(call, response)
                except ApiError as error:
                    failure = error
            retry += 1
            self._sleep(self._delay(call, retry, failure))


class AsyncClient(_Base[Callable[[float], Awaitable[object]], httpx.AsyncClient]):
    """``Client`` for asyncio: the same calls, awaited (``list_runs`` is an async
    iterator); use as an async context manager or ``await client.close()``. ``sleep``
    is awaited between tries (``asyncio.sleep`` by default)."""

    def _default_sleep(self) -> Callable[[float], Awaitable[object]]:
        return asyncio.sleep

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> AsyncClient:
        """``Client.from_env`` for asyncio."""
        url, token = _environment(environ, options)
        return cls(url, token, **options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def enqueue(
        self,
        job: str,
        payload: Any = None,
        *,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        idempotency_key: str | None = None,
        priority: str | None = None,
        if_not_running: bool = False,
    ) -> Run:
        """``Client.enqueue``, awaited."""
        return await self._call(
            self._calls.enqueue(
                job, payload, run_at, delay, idempotency_key, priority, if_not_running
            )
        )

    async def enqueue_many(self, job: str, runs: Iterable[RunRequest]) -> list[BatchResult]:
        """``Client.enqueue_many``, awaited."""
        requests = list(runs)
        if not requests:
            return []
        return await self._call(self._calls.enqueue_many(job, requests))

    async def get_run(self, run_id: str) -> Run:
        """``Client.get_run``, awaited."""
        return await self._call(self._calls.get_run(run_id))

    async def cancel(self, run_id: str) -> Run:
        """``Client.cancel``, awaited."""
        return await self._call(self._calls.cancel(run_id))

    async def runs_page(
        self,
        job: str,
        *,
        state: State | str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> RunPage:
        """``Client.runs_page``, awaited."""
        return await self._call(self._calls.runs_page(job, state, cursor, limit))

    async def list_runs(
        self, job: str, *, state: State | str | None = None, page_size: int | None = None
    ) -> AsyncIterator[Run]:
        """``Client.list_runs`` as an async iterator: ``async for run in
        client.list_runs("export-invoices")``."""
        cursor: str | None = None
        while True:
            page = await self.runs_page(job, state=state, cursor=cursor, limit=page_size)
            for run in page.items:
                yield run
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=self._timeout, headers={"User-Agent": self._user_agent}
            )
        return self._http

    async def _call(self, call: _Call[_T]) -> _T:
        retry = 0
        refreshed = False
        while True:
            request = self._request(call)
            try:
                response = await self._client().request(**request)
            except httpx.TransportError as error:
                if _never_sent(error):
                    raise
                failure: ApiError | ApiUnreachable = _unreachable(request["url"], error)
            else:
                if not refreshed and self._refreshed(response):
                    refreshed = True
                    continue
                try:
                    return _read(call, response)
                except ApiError as error:
                    failure = error
            retry += 1
            await self._sleep(self._delay(call, retry, failure))
