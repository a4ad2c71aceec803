"""One root error; one leaf per problem type of the public contract.

Each leaf carries its problem ``slug`` and HTTP ``status`` so the API maps errors to
``application/problem+json`` without a lookup table, and the CLI and the worker SDK
can name the same problems.
"""

from __future__ import annotations

from typing import ClassVar

PROBLEM_BASE = "https://tickwork.dev/problems/"


class TickworkError(Exception):
    """Root of every error tickwork raises on purpose."""

    slug: ClassVar[str] = "internal"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field

    @property
    def type(self) -> str:
        return PROBLEM_BASE + self.slug


class InvalidSchedule(TickworkError):
    slug = "invalid-schedule"
    status = 400
    title = "Invalid schedule"


class InvalidRequest(TickworkError):
    slug = "invalid-request"
    status = 400
    title = "Invalid request"


class Unauthenticated(TickworkError):
    slug = "unauthenticated"
    status = 401
    title = "Unauthenticated"


class Forbidden(TickworkError):
    slug = "forbidden"
    status = 403
    title = "Forbidden"


class NotFound(TickworkError):
    slug = "not-found"
    status = 404
    title = "Not found"


class StaleLease(TickworkError):
    """The fencing token is older than the run's current lease, or the lease is gone."""

    slug = "stale-lease"
    status = 409
    title = "Stale lease"


class ConcurrencyLimit(TickworkError):
    slug = "concurrency-limit"
    status = 409
    title = "Concurrency limit reached"


class ManagedByKubernetes(TickworkError):
    """The job is declared by a ScheduledJob: change or delete that object instead."""

    slug = "managed-by-kubernetes"
    status = 409
    title = "Managed by Kubernetes"


class InvalidState(TickworkError):
    """A transition the run state machine does not allow (e.g. replaying a run that is not dead)."""

    slug = "invalid-state"
    status = 409
    title = "Transition not allowed"


class PreconditionFailed(TickworkError):
    """An ``If-Match`` (or ``If-None-Match: *``) that the job as it is now does not meet:
    someone changed it since the caller read it (RFC 9110, 13.1.1)."""

    slug = "precondition-failed"
    status = 412
    title = "Precondition failed"


class IdempotencyKeyReused(TickworkError):
    """An idempotency key already used for a different request (IETF Idempotency-Key
    draft: 422). The same request again answers the first run."""

    slug = "idempotency-key-reused"
    status = 422
    title = "Idempotency key reused"


class PayloadTooLarge(TickworkError):
    slug = "payload-too-large"
    status = 413
    title = "Payload too large"


class QuotaExceeded(TickworkError):
    slug = "quota-exceeded"
    status = 429
    title = "Quota exceeded"

    def __init__(self, detail: str, *, retry_after: float, field: str | None = None) -> None:
        super().__init__(detail, field=field)
        self.retry_after = retry_after


class SchemaMismatch(TickworkError):
    """A shard database is not at the schema version this release expects."""

    slug = "schema-mismatch"
    status = 503
    title = "Shard schema mismatch"

    def __init__(self, detail: str, *, summary: str = "not the schema this release needs") -> None:
        super().__init__(detail)
        # What anyone may be told (an unauthenticated /readyz): no host, schema or DSN.
        self.summary = summary


class StoreUnavailable(TickworkError):
    """A shard's database cannot be reached now (restarting, link reset or hung).

    A write cut off this way may or may not have been committed: repeat it after
    ``retry_after`` seconds the idempotent way (the same fencing token for a
    completion, the same ``Idempotency-Key`` for an enqueue)."""

    slug = "store-unavailable"
    status = 503
    title = "Store unavailable"

    def __init__(self, detail: str, *, retry_after: float = 1.0, field: str | None = None) -> None:
        super().__init__(detail, field=field)
        self.retry_after = retry_after


class RequestTimeout(TickworkError):
    """The request did not arrive in time (headers or body sent too slowly)."""

    slug = "request-timeout"
    status = 408
    title = "Request timeout"


class HeadersTooLarge(TickworkError):
    slug = "headers-too-large"
    status = 431
    title = "Request header fields too large"


class ServerBusy(TickworkError):
    """The server holds as many connections as it accepts; try again shortly."""

    slug = "server-busy"
    status = 503
    title = "Server busy"

    def __init__(self, detail: str, *, retry_after: float = 1.0, field: str | None = None) -> None:
        super().__init__(detail, field=field)
        self.retry_after = retry_after


class AuthUnavailable(TickworkError):
    """The identity provider (the Kubernetes API server's TokenReview and
    SubjectAccessReview) did not answer in time or failed: nobody is let in until it
    does. Repeat the call after ``retry_after`` seconds; the token may well be valid."""

    slug = "auth-unavailable"
    status = 503
    title = "Authentication unavailable"

    def __init__(self, detail: str, *, retry_after: float = 1.0, field: str | None = None) -> None:
        super().__init__(detail, field=field)
        self.retry_after = retry_after


class TooManyAuthFailures(TickworkError):
    """Too many calls from one address failed to authenticate lately: its calls are
    refused, before any token is looked at, until ``retry_after`` seconds have passed.
    Guessing tokens gets nowhere, and unknown tokens cannot be multiplied into reviews
    by the Kubernetes API server."""

    slug = "too-many-auth-failures"
    status = 429
    title = "Too many failed authentications"

    def __init__(self, detail: str, *, retry_after: float, field: str | None = None) -> None:
        super().__init__(detail, field=field)
        self.retry_after = retry_after
