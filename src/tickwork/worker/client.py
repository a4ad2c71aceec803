"""A thin async client of the worker endpoints of the tickwork HTTP API.

One ``aiohttp.ClientSession`` (keep-alive) per client, bodies encoded and decoded with
orjson. Each method is one HTTP call and maps the JSON of the contract to small
dataclasses; nothing here retries. Errors come in two kinds:

- ``ApiUnreachable``: no HTTP answer at all (connection refused or reset, timeout);
- ``ApiError``: an HTTP error answer, carrying its ``application/problem+json``
  ``Problem``, raised as the subclass of its slug (``StaleLease``, ``NotFound``: see
  ``tickwork.worker.problems``). ``ApiError.transient`` is true for 5xx (``503
  store-unavailable`` while the database restarts, say), 429 and 408.

Batch endpoints answer one result per item in order: a result dataclass, or the
item's ``Problem`` (a stale lease on one item does not fail the others).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, Literal, TypeVar
from urllib.parse import quote

import aiohttp
import orjson

from tickwork.core import limits
from tickwork.core.hot import hot_record
from tickwork.worker import credentials
from tickwork.worker.problems import (
    ApiError,
    ApiUnreachable,
    Problem,
    answer_object,
    is_transient,
)

__all__ = [
    "ApiError",
    "ApiUnreachable",
    "Beat",
    "Completed",
    "Completion",
    "Extended",
    "Lease",
    "Outcome",
    "Problem",
    "WorkerClient",
    "is_transient",
    "parse_instant",
]

Outcome = Literal["succeeded", "failed", "snoozed"]

_Result = TypeVar("_Result")

_JSON_HEADERS: Final = {"Content-Type": "application/json", "Accept": "application/json"}


@hot_record
class Lease:
    """A run leased to this worker, as ``POST /v1/lease`` hands it out."""

    run_id: str
    job: str
    tenant: str
    queue: str
    priority: str
    attempt: int
    idempotency_key: str
    fencing_token: int
    due_at: datetime | None
    lease_expires_at: datetime | None
    deadline: datetime | None
    payload: Any
    dry_run: bool = False

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Lease:
        return cls(
            run_id=item["runId"],
            job=item["job"],
            tenant=item["tenant"],
            queue=item["queue"],
            priority=item.get("priority", "default"),
            attempt=int(item["attempt"]),
            idempotency_key=item.get("idempotencyKey") or "",
            fencing_token=int(item["fencingToken"]),
            due_at=parse_instant(item.get("dueAt")),
            lease_expires_at=parse_instant(item.get("leaseExpiresAt")),
            deadline=parse_instant(item.get("deadline")),
            payload=item.get("payload"),
            dry_run=item.get("dryRun") is True,
        )


@hot_record
class Beat:
    """One heartbeat: extend ``run_id``'s lease by ``extend_seconds``."""

    run_id: str
    fencing_token: int
    extend_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "fencingToken": self.fencing_token,
            "extendSeconds": self.extend_seconds,
        }


@hot_record
class Extended:
    """A heartbeat's answer."""

    run_id: str
    lease_expires_at: datetime | None
    cancel_requested: bool


@hot_record
class Completion:
    """One outcome. ``retryable=False`` on a failure sends the run straight to the DLQ;
    ``snoozed`` puts the run back for ``delay_seconds`` without using an attempt."""

    run_id: str
    fencing_token: int
    outcome: Outcome
    message: str | None = None
    retryable: bool = True
    delay_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "runId": self.run_id,
            "fencingToken": self.fencing_token,
            "outcome": self.outcome,
        }
        if self.outcome == "failed":
            body["error"] = {"message": self.message or "failed", "retryable": self.retryable}
        elif self.outcome == "snoozed":
            body["delaySeconds"] = self.delay_seconds
        return body


@hot_record
class Completed:
    """A completion's answer: the state it produced and when a retry may start."""

    run_id: str
    state: str
    next_attempt_at: datetime | None


def parse_instant(value: Any) -> datetime | None:
    """An RFC 3339 instant of the API (``Z`` or an offset), or None."""
    if not value:
        return None
    return datetime.fromisoformat(str(value))


class WorkerClient:
    """The worker endpoints over one keep-alive session.

    Use as ``async with WorkerClient(url, token) as client: ...`` or call ``close()``.
    ``token`` is the bearer token, or a ``TokenFile`` read again as it rotates (a call
    refused with 401 is repeated once when the file holds a new token).
    ``request_timeout`` bounds every call; a lease call gets ``waitSeconds`` on top.
    """

    def __init__(
        self,
        url: str,
        token: credentials.Token,
        *,
        request_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        user_agent: str = "tickwork-worker",
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._headers: tuple[str, dict[str, str]] | None = None
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        self._lease_url = self.url + "/v1/lease"
        self._heartbeat_url = self.url + "/v1/runs:heartbeat"
        self._complete_url = self.url + "/v1/runs:complete"

    async def __aenter__(self) -> WorkerClient:
        self.session()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def session(self) -> aiohttp.ClientSession:
        """The one session of this client, opened on first use."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers={"User-Agent": self._user_agent},
                timeout=aiohttp.ClientTimeout(
                    total=self._request_timeout, sock_connect=self._connect_timeout
                ),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def lease(
        self,
        queues: Sequence[str],
        *,
        max_runs: int = 1,
        wait_seconds: float = 0,
        lease_seconds: float = 30,
        worker_id: str,
    ) -> list[Lease]:
        """``POST /v1/lease``: up to ``max_runs`` runs, waiting up to ``wait_seconds``."""
        body = {
            "queues": list(queues),
            "max": max_runs,
            "waitSeconds": wait_seconds,
            "leaseSeconds": lease_seconds,
            "workerId": worker_id,
        }
        answer = await self._post(self._lease_url, body, extra_seconds=wait_seconds)
        return [Lease.from_json(item) for item in answer.get("leases", ())]

    async def heartbeat(self, run_id: str, fencing_token: int, extend_seconds: float) -> Extended:
        """``POST /v1/runs/{runId}/heartbeat``; a stale token raises ``ApiError`` (409)."""
        body = {"fencingToken": fencing_token, "extendSeconds": extend_seconds}
        answer = await self._post(self._run_url(run_id, "heartbeat"), body)
        return _extended(run_id, answer)

    async def complete(
        self,
        run_id: str,
        fencing_token: int,
        outcome: Outcome,
        *,
        message: str | None = None,
        retryable: bool = True,
        delay_seconds: float = 0.0,
    ) -> Completed:
        """``POST /v1/runs/{runId}/complete``; a stale token raises ``ApiError`` (409)."""
        body = Completion(
            run_id, fencing_token, outcome, message, retryable, delay_seconds
        ).to_json()
        del body["runId"]
        answer = await self._post(self._run_url(run_id, "complete"), body)
        return _completed(run_id, answer)

    async def heartbeat_many(self, beats: Sequence[Beat]) -> list[Extended | Problem]:
        """``POST /v1/runs:heartbeat``: one result per beat, in order (≤ 100 beats)."""
        _check_batch(beats, limits.MAX_HEARTBEAT_BATCH)
        answer = await self._post(self._heartbeat_url, {"items": [b.to_json() for b in beats]})
        return [_problem_or(item, _extended) for item in _items(answer, [b.run_id for b in beats])]

    async def complete_many(self, completions: Sequence[Completion]) -> list[Completed | Problem]:
        """``POST /v1/runs:complete``: one result per completion, in order (≤ 100)."""
        _check_batch(completions, limits.MAX_COMPLETE_BATCH)
        answer = await self._post(self._complete_url, {"items": [c.to_json() for c in completions]})
        return [
            _problem_or(item, _completed)
            for item in _items(answer, [c.run_id for c in completions])
        ]

    def _run_url(self, run_id: str, action: str) -> str:
        return f"{self.url}/v1/runs/{quote(run_id, safe='')}/{action}"

    def _timeout(self, extra_seconds: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(extra_seconds)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(
                total=self._request_timeout + extra_seconds, sock_connect=self._connect_timeout
            )
            self._timeouts[extra_seconds] = timeout
        return timeout

    def _request_headers(self) -> dict[str, str]:
        token = credentials.current(self._token)
        if self._headers is None or self._headers[0] != token:
            self._headers = (token, _JSON_HEADERS | {"Authorization": f"Bearer {token}"})
        return self._headers[1]

    async def _post(self, url: str, body: Any, extra_seconds: float = 0) -> dict[str, Any]:
        data = orjson.dumps(body)
        status, raw = await self._send(url, data, extra_seconds)
        token = self._token
        # Refused with a token rotated since it was read: once more with the new one.
        if status == 401 and isinstance(token, credentials.TokenFile) and token.refresh():
            status, raw = await self._send(url, data, extra_seconds)
        return _answer(status, raw)

    async def _send(self, url: str, data: bytes, extra_seconds: float) -> tuple[int, bytes]:
        try:
            async with self.session().post(
                url,
                data=data,
                headers=self._request_headers(),
                timeout=self._timeout(extra_seconds),
            ) as response:
                return response.status, await response.read()
        except aiohttp.ClientError as error:  # refused, reset, malformed HTTP, ...
            raise ApiUnreachable(f"{url}: {error or type(error).__name__}") from error
        except TimeoutError as error:
            raise ApiUnreachable(f"{url}: no answer in time") from error
        except OSError as error:  # a socket error aiohttp did not wrap
            raise ApiUnreachable(f"{url}: {error}") from error


def _answer(status: int, raw: bytes) -> dict[str, Any]:
    if status >= 400:
        raise ApiError.of(Problem.of_answer(status, raw))
    return answer_object(status, raw, "answer is not a JSON object")


def _check_batch(items: Sequence[object], limit: int) -> None:
    if not 1 <= len(items) <= limit:
        raise ValueError(f"a batch holds 1..{limit} items, not {len(items)}")


def _items(answer: dict[str, Any], run_ids: Sequence[str]) -> list[dict[str, Any]]:
    items = answer.get("items")
    if not isinstance(items, list) or len(items) != len(run_ids):
        raise ApiError(Problem.unparsed(200, f"expected {len(run_ids)} items in the batch answer"))
    for item, run_id in zip(items, run_ids, strict=True):
        item.setdefault("runId", run_id)
    return items


def _problem_or(
    item: dict[str, Any], parse: Callable[[str, dict[str, Any]], _Result]
) -> _Result | Problem:
    problem = item.get("problem")
    if problem is not None:
        return Problem.from_json(problem)
    return parse(str(item["runId"]), item)


def _extended(run_id: str, item: dict[str, Any]) -> Extended:
    return Extended(
        run_id=item.get("runId", run_id),
        lease_expires_at=parse_instant(item.get("leaseExpiresAt")),
        cancel_requested=bool(item.get("cancelRequested", False)),
    )


def _completed(run_id: str, item: dict[str, Any]) -> Completed:
    return Completed(
        run_id=item.get("runId", run_id),
        state=str(item["state"]),
        next_attempt_at=parse_instant(item.get("nextAttemptAt")),
    )
