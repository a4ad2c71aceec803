"""What the routes need, built once per app and passed explicitly (no globals): the
engine they call, how callers are authenticated, the metrics, the settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tickwork.api.auth import PRINCIPAL, Authenticator, Principal
from tickwork.api.throttle import FailureThrottle
from tickwork.core.settings import ApiSettings
from tickwork.engine import overview, quotas
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.installation import Installation
from tickwork.engine.jobs import Jobs
from tickwork.engine.metrics import Metrics
from tickwork.engine.notifications import Targets
from tickwork.engine.operations import Operations
from tickwork.engine.queues import Queues
from tickwork.engine.quotas import Admission


@dataclass
class Services:
    engine: Installation
    authenticator: Authenticator
    metrics: Metrics
    settings: ApiSettings = field(default_factory=ApiSettings)
    quota: Admission | None = None
    throttle: FailureThrottle = field(init=False)

    def __post_init__(self) -> None:
        self.throttle = FailureThrottle(
            self.settings.auth_failure_rate, self.settings.auth_failure_burst
        )
        if self.quota is None:
            self.quota = quotas.TenantQuotas(
                self.engine.database,
                self.settings.default_limits(),
                self.settings.tenant_limits(),
                self.engine.clock,
            )

    @property
    def jobs(self) -> Jobs:
        return self.engine.jobs

    @property
    def dispatcher(self) -> Dispatcher:
        return self.engine.dispatcher

    async def now(self) -> datetime:
        """Now, by the database clock (or the installation's): what the dashboard's times
        count from."""
        return await overview.current_time(self.engine.database, self.engine.clock)

    # The engine's services over the installation's shards and clock.

    @property
    def queues(self) -> Queues:
        return Queues(self.engine.database, self.engine.clock)

    @property
    def targets(self) -> Targets:
        return Targets(self.engine.database, self.engine.clock)

    @property
    def operations(self) -> Operations:
        return Operations(self.engine.database, self.engine.clock)


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


async def services_dependency(request: Request) -> Services:
    """``services`` for ``Depends``: a coroutine, which FastAPI awaits on the event loop
    (a plain function it runs in a worker thread, a hop per request)."""
    return services(request)


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
