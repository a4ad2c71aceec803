"""The API's refusals as Python exceptions: one class per problem type of the contract.

Every error answer is an RFC 9457 problem (``docs/http-api.md``, Problems); the SDK
raises it as the ``ApiError`` subclass of its slug, so callers catch what they can
handle (``except NotFound``) and let the rest through. Each carries the problem's
``status``, ``detail`` and ``field``, and ``retry_after`` (seconds) when the answer had
a ``Retry-After`` header. A slug this release does not know, or an answer that is not a
problem (a proxy's error page), is a plain ``ApiError``.

The classes are not ``tickwork.core.errors``' own: those are what the server raises
(their status is fixed per class, ``QuotaExceeded`` needs its ``retry_after`` to be
made), these are what a client was answered (the status and headers as they came).
The slugs are the core's, so both sides name the same problems.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import orjson

from tickwork.core import errors


@dataclass(frozen=True, slots=True)
class Problem:
    """An RFC 9457 problem: ``type`` is ``https://tickwork.dev/problems/<slug>``."""

    type: str
    title: str
    status: int
    detail: str = ""
    field: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The last part of ``type``, e.g. ``stale-lease``."""
        return self.type.removeprefix(errors.PROBLEM_BASE)

    @property
    def stale_lease(self) -> bool:
        """The lease is gone or a newer one exists: drop the run, never retry the call."""
        return self.slug == errors.StaleLease.slug

    @property
    def lease_lost(self) -> bool:
        """The worker no longer holds the run: a stale lease, or a run that is gone."""
        return self.stale_lease or self.slug == errors.NotFound.slug

    @property
    def transient(self) -> bool:
        """Worth repeating later: the server failed or was unavailable (one item of a
        batch whose shard was down, say), asked the client to slow down, or timed out."""
        return self.status >= 500 or self.status in _RETRIED_STATUSES

    @classmethod
    def from_json(cls, data: Any, status: int = 0) -> Problem:
        if not isinstance(data, dict):
            return cls.unparsed(status, "")
        known = {"type", "title", "status", "detail", "field"}
        return cls(
            type=str(data.get("type") or "about:blank"),
            title=str(data.get("title") or ""),
            status=int(data.get("status") or status),
            detail=str(data.get("detail") or ""),
            field=data.get("field"),
            extra={k: v for k, v in data.items() if k not in known},
        )

    @classmethod
    def unparsed(cls, status: int, text: str) -> Problem:
        """An error answer that was not problem+json (a proxy's error page, say)."""
        return cls(type="about:blank", title=f"HTTP {status}", status=status, detail=text[:500])

    @classmethod
    def of_answer(cls, status: int, raw: bytes) -> Problem:
        """The problem an error answer's body holds, or its text when it holds none."""
        try:
            return cls.from_json(orjson.loads(raw), status)
        except orjson.JSONDecodeError:
            return cls.unparsed(status, raw.decode(errors="replace"))


def answer_object(status: int, raw: bytes, not_an_object: str) -> dict[str, Any]:
    """The JSON object a 2xx answer's body holds; an ``ApiError`` (``not_an_object`` its
    detail when the body is JSON of another kind) when it holds none."""
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise ApiError(Problem.unparsed(status, raw.decode(errors="replace"))) from error
    if not isinstance(answer, dict):
        raise ApiError(Problem.unparsed(status, not_an_object))
    return answer


_RETRIED_STATUSES: Final = frozenset({errors.QuotaExceeded.status, errors.RequestTimeout.status})


class ApiError(Exception):
    """The API answered with an HTTP error: ``problem`` says which.

    ``ApiError.of(problem)`` makes the subclass of the problem's slug (``NotFound``,
    ``QuotaExceeded``, ...); ``ApiError(problem)`` makes this class itself.
    """

    slug: ClassVar[str] = ""
    """The problem type this class stands for (empty: any, or none)."""

    def __init__(self, problem: Problem, *, retry_after: float | None = None) -> None:
        detail = f": {problem.detail}" if problem.detail else ""
        super().__init__(f"{problem.status} {problem.slug}{detail}")
        self.problem = problem
        self.retry_after = retry_after
        """Seconds the answer's ``Retry-After`` asked to wait, or None."""

    @staticmethod
    def of(problem: Problem, *, retry_after: float | None = None) -> ApiError:
        """The exception for ``problem``: the class of its slug, else ``ApiError``."""
        return _BY_SLUG.get(problem.slug, ApiError)(problem, retry_after=retry_after)

    @property
    def status(self) -> int:
        return self.problem.status

    @property
    def detail(self) -> str:
        return self.problem.detail

    @property
    def field(self) -> str | None:
        """The offending field (``payload.db.password``, ``runs[3].runAt``), if one."""
        return self.problem.field

    @property
    def title(self) -> str:
        return self.problem.title

    @property
    def transient(self) -> bool:
        """Worth retrying later: the server failed or is unavailable, asked the client
        to slow down, or timed out reading the request."""
        return self.problem.transient


class ApiUnreachable(Exception):
    """No HTTP answer: the API is down, unreachable, or too slow to answer."""


def is_transient(error: BaseException) -> bool:
    """Whether a failed call is worth repeating after a backoff."""
    if isinstance(error, ApiUnreachable):
        return True
    return isinstance(error, ApiError) and error.transient


# One class per row of docs/http-api.md's Problems table (a test holds them together).


class InvalidSchedule(ApiError):
    """400: the cron expression or the time zone is invalid."""

    slug = errors.InvalidSchedule.slug


class InvalidRequest(ApiError):
    """400: a field is invalid (``field`` names it), or the payload holds a credential."""

    slug = errors.InvalidRequest.slug


class Unauthenticated(ApiError):
    """401: no token, or one the API does not know (or no longer accepts)."""

    slug = errors.Unauthenticated.slug


class Forbidden(ApiError):
    """403: outside the token's tenant, role or queues."""

    slug = errors.Forbidden.slug


class NotFound(ApiError):
    """404: no such job or run (or one the caller may not see)."""

    slug = errors.NotFound.slug


class MethodNotAllowed(ApiError):
    """405: the wrong method for the path."""

    slug = "method-not-allowed"


class StaleLease(ApiError):
    """409: the fencing token is older than the run's current lease, or the lease is gone."""

    slug = errors.StaleLease.slug


class ConcurrencyLimit(ApiError):
    """409: an ``if_not_running`` enqueue while the job is at its concurrency limit."""

    slug = errors.ConcurrencyLimit.slug


class InvalidState(ApiError):
    """409: a transition the run state machine refuses (cancelling a finished run)."""

    slug = errors.InvalidState.slug


class ManagedByKubernetes(ApiError):
    """409: the job is declared by a ScheduledJob: edit that object instead."""

    slug = errors.ManagedByKubernetes.slug


class PreconditionFailed(ApiError):
    """412: the job changed since its ETag was read (``If-Match``), or exists already
    (``If-None-Match: *``): read it again and redo the edit."""

    slug = errors.PreconditionFailed.slug


class PayloadTooLarge(ApiError):
    """413: a payload over 256 KiB encoded, or a request body over 4 MiB."""

    slug = errors.PayloadTooLarge.slug


class IdempotencyKeyReused(ApiError):
    """422: the idempotency key was used for a different request (``field`` names it)."""

    slug = errors.IdempotencyKeyReused.slug


class QuotaExceeded(ApiError):
    """429: the tenant is over its enqueue rate or pending runs; see ``retry_after``."""

    slug = errors.QuotaExceeded.slug


class TooManyAuthFailures(ApiError):
    """429: too many calls from this address failed to authenticate lately."""

    slug = errors.TooManyAuthFailures.slug


class RequestTimeout(ApiError):
    """408: the request's headers or body did not arrive in time."""

    slug = errors.RequestTimeout.slug


class HeadersTooLarge(ApiError):
    """431: the request line and headers are over 16 KiB."""

    slug = errors.HeadersTooLarge.slug


class StoreUnavailable(ApiError):
    """503: a shard's database cannot be reached now; see ``retry_after``."""

    slug = errors.StoreUnavailable.slug


class AuthUnavailable(ApiError):
    """503: the Kubernetes API server did not review the token in time."""

    slug = errors.AuthUnavailable.slug


class ServerBusy(ApiError):
    """503: the API process holds as many connections as it accepts."""

    slug = errors.ServerBusy.slug


PROBLEM_CLASSES: Final[tuple[type[ApiError], ...]] = (
    InvalidSchedule,
    InvalidRequest,
    Unauthenticated,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    StaleLease,
    ConcurrencyLimit,
    InvalidState,
    ManagedByKubernetes,
    PreconditionFailed,
    PayloadTooLarge,
    IdempotencyKeyReused,
    QuotaExceeded,
    TooManyAuthFailures,
    RequestTimeout,
    HeadersTooLarge,
    StoreUnavailable,
    AuthUnavailable,
    ServerBusy,
)
"""Every problem type of the contract, as its class."""

_BY_SLUG: Final = {cls.slug: cls for cls in PROBLEM_CLASSES}
