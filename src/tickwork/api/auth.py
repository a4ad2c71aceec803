"""Authentication of API calls: who a bearer token stands for.

A bearer token maps to a ``Principal``: a tenant, a role (team, worker, admin, metrics)
and, for workers, the queues they may lease. The ``Authenticator`` protocol is the seam
where Kubernetes TokenReview plugs in (``kubernetes_auth``); outside Kubernetes the
mapping is a tokens file. Tokens are compared in constant time.

What a principal may then do is ``access``'s to decide (one policy for the API, its
fast path and the dashboard). A Kubernetes principal carries ``Grants`` that ask the API
server (cached), so RBAC on the ``tickwork.dev`` API group decides each of its calls.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope

from tickwork.api import problems
from tickwork.api.throttle import FailureThrottle
from tickwork.core.errors import InvalidRequest, TickworkError, Unauthenticated
from tickwork.core.spec import check_queue, check_tenant


class Role(enum.StrEnum):
    team = "team"  # manages its tenant's jobs, runs and DLQ
    worker = "worker"  # leases, heartbeats and completes runs of its queues
    admin = "admin"  # everything, for any tenant (``?tenant=``)
    metrics = "metrics"  # reads /metrics and nothing else (a Prometheus scrape)
    # A Kubernetes ServiceAccount: RBAC decides each call (SubjectAccessReview). Never
    # a tokens file's: such a token would act in every namespace with no RBAC to ask.
    kubernetes = "kubernetes"


# The roles a tokens file may give.
FILE_ROLES: Final = (Role.team, Role.worker, Role.admin, Role.metrics)


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a call does, in the terms of a Kubernetes ``SubjectAccessReview`` on
    the ``tickwork.dev`` API group: ``verb`` on ``resource`` (``name`` when the call
    names one) in the namespace ``tenant``. ``path`` instead names a non-resource URL
    (``/metrics``)."""

    verb: str
    resource: str = ""
    tenant: str = ""
    name: str | None = None
    path: str | None = None

    def describe(self) -> str:
        if self.path is not None:
            return f"{self.verb} {self.path}"
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {self.resource}{named} in namespace {self.tenant!r}"


class Grants(Protocol):
    async def check(self, actions: Sequence[Action]) -> None:
        """Return if every action is allowed; raise ``Forbidden`` naming the first that
        is not (or ``AuthUnavailable`` when nobody can tell)."""

    async def permitted(self, actions: Sequence[Action]) -> list[bool]:
        """Whether each action is allowed, in order (``AuthUnavailable`` when nobody
        can tell)."""


@dataclass(frozen=True, slots=True)
class Principal:
    subject: str
    tenant: str
    role: Role
    # None: every queue of the tenant (teams and admins).
    queues: frozenset[str] | None = None
    # Who decides each action (Kubernetes principals); None: the role alone decides.
    grants: Grants | None = field(default=None, compare=False)


class Authenticator(Protocol):
    async def authenticate(self, token: str) -> Principal | None:
        """The principal a bearer token stands for, or None for an unknown token."""


class TokenEntry(BaseModel):
    """One entry of a tokens file: ``{token, tenant, role, queues}`` (and a ``name``),
    optionally with the tenant's quotas."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    token: str = Field(
        min_length=16, description="The bearer token (16+ characters, no whitespace)."
    )
    tenant: str = Field(description="The tenant (namespace) it acts for: a DNS-1123 label.")
    role: Role = Field(
        description="team (its tenant's jobs, runs and DLQ), worker (leases its queues), "
        "admin (everything, any tenant) or metrics (reads /metrics only)."
    )
    queues: list[str] | None = Field(
        default=None,
        description="Queues a worker may lease (at least one for workers; teams and admins "
        "act on every queue of their tenant and may leave it out or empty).",
    )
    name: str | None = Field(default=None, description="Who holds it, for audit logs.")
    # The tenant's quotas (any token of the tenant may carry them; unset: the defaults).
    enqueue_rate: float | None = Field(
        default=None, alias="enqueueRate", gt=0, description="Enqueues per second."
    )
    enqueue_burst: float | None = Field(
        default=None, alias="enqueueBurst", ge=1, description="Enqueues at once above the rate."
    )
    max_pending_runs: int | None = Field(
        default=None, alias="maxPendingRuns", ge=1, description="Runs waiting at most."
    )

    @field_validator("token")
    @classmethod
    def _no_whitespace(cls, value: str) -> str:
        # A bearer token cannot hold whitespace on the wire (the header splits there):
        # such an entry could never be used, or only by a token nobody meant.
        if not value.strip() or any(c.isspace() for c in value):
            raise PydanticCustomError("invalid_token", "a token must not contain whitespace")
        return value

    @field_validator("role")
    @classmethod
    def _file_role(cls, value: Role) -> Role:
        if value not in FILE_ROLES:
            allowed = ", ".join(role.value for role in FILE_ROLES)
            raise PydanticCustomError(
                "invalid_role",
                "role '{role}' cannot be given in a tokens file (it would act in every "
                "tenant with no RBAC to ask): use one of {allowed}",
                {"role": value.value, "allowed": allowed},
            )
        return value

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        try:
            check_tenant(value)
        except ValueError as error:
            raise PydanticCustomError("invalid_tenant", str(error)) from None
        return value

    @field_validator("queues")
    @classmethod
    def _queue_names(cls, value: list[str] | None) -> list[str] | None:
        for queue in value or ():
            check_queue(queue)
        return value


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class StaticTokens:
    """Tokens known up front (a tokens file, or the token ``tickwork dev`` generates).

    Lookup is by SHA-256 digest, so the dictionary probe never compares secret bytes;
    the final check uses ``hmac.compare_digest``.
    """

    def __init__(self, entries: Iterable[TokenEntry]) -> None:
        self._by_digest: dict[bytes, tuple[bytes, Principal]] = {}
        self.quota_overrides: dict[str, dict[str, float | int]] = {}
        for index, entry in enumerate(entries):
            self._add_quotas(index, entry)
            if entry.role is Role.worker and not entry.queues:
                raise ValueError(f"token #{index + 1}: a worker token must list at least one queue")
            digest = _digest(entry.token)
            if digest in self._by_digest:
                raise ValueError(f"token #{index + 1} is listed twice")
            principal = Principal(
                subject=entry.name or f"{entry.role.value}:{entry.tenant}#{index + 1}",
                tenant=entry.tenant,
                role=entry.role,
                queues=frozenset(entry.queues or ()) if entry.role is Role.worker else None,
            )
            self._by_digest[digest] = (digest, principal)

    def _add_quotas(self, index: int, entry: TokenEntry) -> None:
        given = {
            key: value
            for key, value in (
                ("enqueue_rate", entry.enqueue_rate),
                ("enqueue_burst", entry.enqueue_burst),
                ("max_pending_runs", entry.max_pending_runs),
            )
            if value is not None
        }
        known = self.quota_overrides.setdefault(entry.tenant, {})
        for key, value in given.items():
            if known.get(key, value) != value:
                raise ValueError(
                    f"token #{index + 1}: tenant {entry.tenant!r} is given two different "
                    f"{key} quotas"
                )
            known[key] = value
        if not known:
            del self.quota_overrides[entry.tenant]

    @property
    def count(self) -> int:
        return len(self._by_digest)

    async def authenticate(self, token: str) -> Principal | None:
        digest = _digest(token)
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found[0], digest):
            return None
        return found[1]

    @classmethod
    def from_file(cls, path: Path) -> StaticTokens:
        """Load a YAML list of ``{token, tenant, role, queues, name}``, optionally with
        the tenant's quotas (``enqueueRate``, ``enqueueBurst``, ``maxPendingRuns``)."""
        try:
            document = yaml.safe_load(path.read_text("utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise ValueError(f"cannot read tokens file {path}: {error}") from error
        if not isinstance(document, list):
            raise ValueError(f"tokens file {path} must hold a YAML list of tokens")
        entries = []
        for index, item in enumerate(document):
            try:
                entries.append(TokenEntry.model_validate(item))
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "entry"
                raise ValueError(
                    f"tokens file {path}, entry #{index + 1}: {where}: {first['msg']}"
                ) from error
        return cls(entries)


def generate_token() -> str:
    return "tw_" + secrets.token_urlsafe(32)


async def authenticate_header(authenticator: Authenticator, header: str | None) -> Principal:
    """The principal of an ``Authorization: Bearer <token>`` header, or 401."""
    if not header:
        raise Unauthenticated("missing Authorization: Bearer <token> header")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    principal = await authenticator.authenticate(token.strip())
    if principal is None:
        raise Unauthenticated("unknown token")
    return principal


def generation(authenticator: Authenticator) -> int:
    """How many times ``authenticator``'s tokens were replaced while serving (a reloaded
    tokens file): a long call compares it to decide whether to check its token again."""
    return int(getattr(authenticator, "generation", 0))


class Revocation:
    """Whether the token of a long call (a lease long-poll) was removed while it waited:
    a reloaded tokens file refuses it from the next call on, and ends the waits it
    holds. ``or_gone(gone)`` is the dispatcher's "stop waiting" check with this one in
    it; ``check()`` then answers 401 for a removed token (the runs it may have been given
    meanwhile were handed back, as for a client that went away)."""

    def __init__(self, authenticator: Authenticator, request: Request) -> None:
        self._authenticator = authenticator
        self._generation = generation(authenticator)
        self._header = authorization_header(request.scope.get("headers") or ())
        self.revoked = False

    async def _revoked(self) -> bool:
        now = generation(self._authenticator)
        if self.revoked or now == self._generation or self._header is None:
            return self.revoked
        self._generation = now
        _, _, token = self._header.partition(" ")
        self.revoked = await self._authenticator.authenticate(token.strip()) is None
        return self.revoked

    def or_gone(self, gone: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return await self._revoked() or await gone()

        return check

    def check(self) -> None:
        if self.revoked:
            raise Unauthenticated("the token was removed from the tokens file while it waited")


class FirstMatch:
    """Several authenticators as one: the first that knows a token decides.

    ``tickwork dev`` serves the tokens file and the demo worker's own token together.
    """

    def __init__(self, authenticators: Sequence[Authenticator]) -> None:
        self._authenticators = tuple(authenticators)

    @property
    def generation(self) -> int:
        return sum(generation(a) for a in self._authenticators)

    async def authenticate(self, token: str) -> Principal | None:
        for authenticator in self._authenticators:
            principal = await authenticator.authenticate(token)
            if principal is not None:
                return principal
        return None


# Open to anyone: probes must work without a token.
PUBLIC_PATHS: Final = frozenset({"/healthz", "/readyz"})
# The dashboard authenticates its own callers: a session cookie, checked through the
# same authenticator before any body is read (only the sign-in form carries a token in
# its body). Browsers send no Authorization header.
DASHBOARD_PREFIX: Final = "/ui"
# Where ``Authenticate`` leaves the caller, in the request's state.
PRINCIPAL: Final = "principal"


def authorization_header(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The one ``Authorization`` header of a request; two or more are refused (proxies
    and servers disagree on which one counts)."""
    values = [value for name, value in headers if name == b"authorization"]
    if len(values) > 1:
        raise InvalidRequest("give one Authorization header, not several", field="Authorization")
    return values[0].decode("latin-1") if values else None


class Authenticate:
    """ASGI middleware: every call but ``PUBLIC_PATHS`` is authenticated from its
    headers before anything reads its body, so a caller without a valid token learns
    nothing about the body it sent and cannot make the server wait for one. The
    principal is left in the request's state for the routes."""

    def __init__(
        self, app: ASGIApp, authenticator: Authenticator, throttle: FailureThrottle
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.throttle = throttle

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or path in PUBLIC_PATHS
            or path == DASHBOARD_PREFIX
            or path.startswith(DASHBOARD_PREFIX + "/")
        ):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        host = client[0] if client else None
        try:
            self.throttle.check(host)
            header = authorization_header(scope.get("headers", ()))
            caller = await authenticate_header(self.authenticator, header)
        except TickworkError as error:
            if isinstance(error, Unauthenticated):
                self.throttle.failed(host)
            await problems.response(error)(scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL] = caller
        await self.app(scope, receive, send)
