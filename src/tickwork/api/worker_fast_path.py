"""The workers' hot calls served without FastAPI's routing: ``POST /v1/lease``,
``POST /v1/runs:heartbeat`` and ``POST /v1/runs:complete`` (the worker SDK's), and
``POST /v1/runs/{runId}/heartbeat`` and ``.../complete`` (a worker's of one run at a
time) go straight to their route functions.

Those functions take the request alone, and the run's id (no dependencies for FastAPI
to solve), yet FastAPI's route matching, dependency solving, exit stacks and exception
wrappers cost about as much CPU per call as the functions themselves: with a worker
leasing one run at a time, about half of a call's time in the dispatcher. This sits
inside the body deadline, authentication and body limit (so a call here is checked
exactly as any other) and answers errors as the app's exception handlers do: a
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

from tickwork.api import problems, worker_routes
from tickwork.core.errors import TickworkError
from tickwork.engine import outages

Route = Callable[[Request], Awaitable[Response]]
RunRoute = Callable[[str, Request], Awaitable[Response]]

ROUTES: Final[dict[str, Route]] = {
    "/v1/lease": worker_routes.lease,
    "/v1/runs:heartbeat": worker_routes.heartbeat_batch,
    "/v1/runs:complete": worker_routes.complete_batch,
}
# /v1/runs/{runId}/<action>, by action; {runId} is one path segment, as FastAPI reads it.
RUN_PREFIX: Final = "/v1/runs/"
RUN_ROUTES: Final[dict[str, RunRoute]] = {
    "heartbeat": worker_routes.heartbeat,
    "complete": worker_routes.complete,
}


class WorkerFastPath:
    def __init__(
        self,
        app: ASGIApp,
        routes: dict[str, Route] = ROUTES,
        run_routes: dict[str, RunRoute] = RUN_ROUTES,
    ) -> None:
        self.app = app
        self.routes = routes
        self.run_routes = run_routes

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
        if found is not None or not path.startswith(RUN_PREFIX):
            return found
        run_id, slash, action = path[len(RUN_PREFIX) :].partition("/")
        run_route = self.run_routes.get(action) if slash and run_id else None
        if run_route is None:
            return None
        return functools.partial(run_route, run_id)
