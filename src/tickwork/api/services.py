"""What the routes need, built once per app and passed explicitly (no globals)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tickwork.api.auth import PRINCIPAL, Authenticator, Principal
from tickwork.core import fairness, limits
from tickwork.engine import quotas
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import Metrics
from tickwork.engine.quotas import Admission
from tickwork.store.database import Database
from tickwork.store.wakeup import ReadySignal


@dataclass(frozen=True)
class ApiSettings:
    # Bounds every request body: a batch of 1 000 runs of 256 KiB each is not welcome.
    max_body_bytes: int = limits.MAX_BODY_BYTES
    # A long-poll re-checks the database at least this often, in case a notification
    # was lost while a listening connection was being re-established.
    long_poll_recheck_seconds: float = 5.0
    default_page_size: int = limits.DEFAULT_PAGE_SIZE
    max_page_size: int = limits.MAX_PAGE_SIZE
    # Per tenant, shared by every API process: a sustained enqueue rate, the burst above
    # it, and the most runs waiting (scheduled, ready, retry_wait). The tokens file may
    # set them per tenant.
    enqueue_rate: float = quotas.DEFAULT_ENQUEUE_RATE
    enqueue_burst: float = quotas.DEFAULT_ENQUEUE_BURST
    max_pending_runs: int = quotas.DEFAULT_MAX_PENDING_RUNS
    quota_overrides: Mapping[str, Mapping[str, float | int]] = field(default_factory=dict)
    # Claims split critical/default/bulk by these weights when all have ready work.
    priority_weights: tuple[float, float, float] = fairness.DEFAULT_WEIGHTS
    # /readyz answers within this many seconds even when a shard's link hangs.
    readiness_timeout_seconds: float = 1.0
    # A request body must have arrived whole this many seconds after its headers.
    body_timeout_seconds: float = limits.BODY_READ_TIMEOUT_SECONDS
    # The dashboard: the secret that seals its session cookies (shared by every API
    # replica; None draws one per process), how long a session lasts, and how often
    # an open page refreshes its live region.
    ui_secret: str | None = field(default=None, repr=False)
    ui_session_seconds: int = 8 * 3600
    ui_poll_seconds: float = 5.0

    def tenant_limits(self) -> dict[str, quotas.TenantLimits]:
        defaults = self.default_limits()
        return {
            tenant: dataclasses.replace(defaults, **given)  # type: ignore[arg-type]
            for tenant, given in self.quota_overrides.items()
        }

    def default_limits(self) -> quotas.TenantLimits:
        return quotas.TenantLimits(self.enqueue_rate, self.enqueue_burst, self.max_pending_runs)


@dataclass
class Services:
    database: Database
    jobs: Jobs
    dispatcher: Dispatcher
    signal: ReadySignal
    authenticator: Authenticator
    metrics: Metrics
    settings: ApiSettings = field(default_factory=ApiSettings)
    quota: Admission | None = None

    def __post_init__(self) -> None:
        if self.quota is None:
            self.quota = quotas.TenantQuotas(
                self.database,
                self.settings.default_limits(),
                self.settings.tenant_limits(),
                self.jobs.clock,
            )


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


# Declares the bearer scheme in the OpenAPI document; auth.Authenticate checks it.
_bearer = HTTPBearer(auto_error=False, description="A tickwork token.")


def caller(request: Request) -> Principal:
    """Who is calling: ``auth.Authenticate`` authenticated the request before any
    route saw it."""
    found: Principal = request.scope["state"][PRINCIPAL]
    return found


async def principal(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    return caller(request)
