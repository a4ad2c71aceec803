"""The hot calls served without FastAPI's routing.

- The workers': ``POST /v1/lease``, ``POST /v1/runs:heartbeat`` and
  ``POST /v1/runs:complete`` (the worker SDK's), and ``POST /v1/runs/{runId}/heartbeat``
  and ``.../complete`` (a worker's of one run at a time).
- The enqueues: ``POST /v1/jobs/{name}/runs`` and ``POST /v1/jobs/{name}/runs:batch``,
  when the call has no query string (no ``tenant``) and at most one well-formed
  ``Idempotency-Key``; any other such call is FastAPI's, which checks those parameters.

Each goes straight to its route function, given what FastAPI would have given it. The
functions do their own checks, yet FastAPI's route matching, dependency solving, exit
stacks and exception wrappers cost as much CPU per call as the functions themselves, a
large share of a small call's time in the dispatcher (``make profile`` shows how much
today), and an idle wake-up waits for the enqueue call before anything else. This
sits inside the body deadline, authentication and body limit (so a call here is
checked exactly as any other) and answers errors as the app's exception handlers do: a
problem for a ``TickworkError``, 503 for a store outage, and anything else goes on up
to the server-error handler. The routes stay registered with FastAPI for the OpenAPI
document and for any other method or path.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tickwork.api import jobs_routes, problems, worker_routes
from tickwork.api.services import caller, services
from tickwork.core import limits
from tickwork.core.errors import TickworkError
from tickwork.engine import outages

Route = Callable[[Request], Awaitable[Response]]
PathRoute = Callable[[str, Request], Awaitable[Response]]

ROUTES: Final[dict[str, Route]] = {
    "/v1/lease": worker_routes.lease,
    "/v1/runs:heartbeat": worker_routes.heartbeat_batch,
    "/v1/runs:complete": worker_routes.complete_batch,
}
# /v1/runs/{runId}/<action>, by action; {runId} is one path segment, as FastAPI reads it.
RUN_PREFIX: Final = "/v1/runs/"
RUN_ROUTES: Final[dict[str, PathRoute]] = {
    "heartbeat": worker_routes.heartbeat,
    "complete": worker_routes.complete,
}


async def _enqueue(name: str, request: Request) -> Response:
    # At most one key is here (_plain_enqueue).
    key = request.headers.get("idempotency-key")
    return await jobs_routes.enqueue(name, caller(request), services(request), request, key, None)


async def _enqueue_batch(name: str, request: Request) -> Response:
    return await jobs_routes.enqueue_batch(name, caller(request), services(request), request, None)


# /v1/jobs/{name}/<action>, by action; {name} is one path segment.
JOB_PREFIX: Final = "/v1/jobs/"
JOB_ROUTES: Final[dict[str, PathRoute]] = {
    "runs": _enqueue,
    "runs:batch": _enqueue_batch,
}


class FastPath:
    def __init__(
        self,
        app: ASGIApp,
        routes: dict[str, Route] = ROUTES,
        run_routes: dict[str, PathRoute] = RUN_ROUTES,
        job_routes: dict[str, PathRoute] = JOB_ROUTES,
    ) -> None:
        self.app = app
        self.routes = routes
        self.run_routes = run_routes
        self.job_routes = job_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._route(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await route(request)
        except TickworkError as error:
            response = problems.response(error)
        except Exception as error:
            if not outages.is_outage(error):
                raise  # the server-error handler logs it and answers 500, as for any route
            response = problems.outage_response(request, error)
        await response(scope, receive, send)

    def _route(self, scope: Scope) -> Route | None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        found = self.routes.get(path)
        if found is not None:
            return found
        if path.startswith(RUN_PREFIX):
            return _segment_route(path[len(RUN_PREFIX) :], self.run_routes)
        if path.startswith(JOB_PREFIX) and _plain_enqueue(scope):
            return _segment_route(path[len(JOB_PREFIX) :], self.job_routes)
        return None


def _segment_route(rest: str, routes: dict[str, PathRoute]) -> Route | None:
    """The route of ``<segment>/<action>``, given the segment."""
    segment, slash, action = rest.partition("/")
    route = routes.get(action) if slash and segment else None
    if route is None:
        return None
    return functools.partial(route, segment)


def _plain_enqueue(scope: Scope) -> bool:
    """No parameter for FastAPI to check: no query string, and no Idempotency-Key or one
    of an allowed length (FastAPI answers any other with its validation problem)."""
    if scope.get("query_string"):
        return False
    keys = [value for name, value in scope["headers"] if name == b"idempotency-key"]
    if not keys:
        return True
    # Starlette decodes header values as latin-1: one byte, one character.
    return len(keys) == 1 and 1 <= len(keys[0]) <= limits.MAX_IDEMPOTENCY_KEY_LENGTH
