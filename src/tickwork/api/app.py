"""The app factory: one FastAPI app per call, from explicit services (no globals)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import orjson
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwork import __version__
from tickwork.api import (
    audit_routes,
    auth,
    edge,
    fast_path,
    jobs_routes,
    notifications_routes,
    operations_routes,
    ops_routes,
    problems,
    queues_routes,
    render,
    request_metrics,
    worker_routes,
)
from tickwork.api.services import Services
from tickwork.api.ui import routes as dashboard
from tickwork.core.errors import PayloadTooLarge

DESCRIPTION = """\
Cron, delayed and one-off jobs on sharded PostgreSQL. Every call but `/healthz` and
`/readyz` needs `Authorization: Bearer <token>`. Errors are `application/problem+json`.
"""


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413 before reading them whole."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await self._refuse(send)
                return
        received = 0
        limit = self.limit

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLarge(f"request body over {limit} bytes")
            return message

        await self.app(scope, limited, send)

    async def _refuse(self, send: Send) -> None:
        body = render.dumps(
            render.problem(PayloadTooLarge(f"request body over {self.limit} bytes"))
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", problems.MEDIA_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _hoist_definitions(document: dict[str, Any]) -> dict[str, Any]:
    """Move the ``$defs`` of hand-written request body schemas into
    ``components.schemas``, where their ``$ref``s point."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            for media in operation.get("requestBody", {}).get("content", {}).values():
                definitions = media.get("schema", {}).pop("$defs", {})
                for name, definition in definitions.items():
                    schemas.setdefault(name, definition)
    return document


# FastAPI's OpenAPI model reads these keywords as floats: 2**63, a fencing token's
# bound, would be written 9.223372036854776e+18, which a reader taking the decimal as
# written (a request generator) reads as 2**63 + 192.
_NUMERIC_KEYWORDS: Final = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)


def _exact_bounds(node: Any) -> Any:
    """``node`` with the integral float values of numeric keywords back as integers
    (exact: every bound in the models is an integer a float holds exactly)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _NUMERIC_KEYWORDS and isinstance(value, float) and value.is_integer():
                node[key] = int(value)
            else:
                _exact_bounds(value)
    elif isinstance(node, list):
        for item in node:
            _exact_bounds(item)
    return node


_PROBLEM_REF: Final = {"$ref": "#/components/schemas/Problem"}
_VALIDATION_ERROR_REF: Final = "#/components/schemas/HTTPValidationError"


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {problems.MEDIA_TYPE: {"schema": _PROBLEM_REF}}}


def _is_problem(answer: dict[str, Any]) -> bool:
    """An error answer documented without a body, or with the Problem model."""
    content = answer.get("content")
    return not content or all(media.get("schema") == _PROBLEM_REF for media in content.values())


def _document_problems(document: dict[str, Any]) -> dict[str, Any]:
    """Make the document say what the server does on errors, on every route at once.

    FastAPI documents every response model as ``application/json`` and adds a 422
    "Validation Error" of its own shape to routes with parameters; tickwork answers
    every error as ``application/problem+json`` and refuses invalid input with 400 (a
    route's own 422, such as idempotency-key-reused, stays). An error answer documented
    with a model of its own (``/readyz``'s 503) keeps it. Every route that needs a token
    can answer 401, and 503 when the store or the identity provider cannot be reached;
    every request body can be over the body limit (413).
    """
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            answers: dict[str, Any] = operation.setdefault("responses", {})
            if _VALIDATION_ERROR_REF in orjson.dumps(answers.get("422", {})).decode():
                del answers["422"]
            for status, answer in answers.items():
                if status.isdigit() and int(status) >= 400 and _is_problem(answer):
                    answer["content"] = {problems.MEDIA_TYPE: {"schema": _PROBLEM_REF}}
            if operation.get("security"):
                answers.setdefault("401", _problem("unauthenticated"))
                answers.setdefault(
                    "503", _problem("store-unavailable / auth-unavailable (see Retry-After)")
                )
            if "requestBody" in operation:
                answers.setdefault("413", _problem("payload-too-large (request body)"))
    schemas = document.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):  # the first refers to the second
        if f'"#/components/schemas/{unused}"' not in orjson.dumps(document).decode():
            schemas.pop(unused, None)
    return document


def create_app(services: Services) -> FastAPI:
    """The API over ``services``. The caller owns the database pools; the app starts and
    stops the LISTEN connections that wake long-polls."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await services.dispatcher.start()
        try:
            yield
        finally:
            await services.dispatcher.stop()

    app = FastAPI(
        title="tickwork",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url=None,  # served by ops_routes behind authentication
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = _hoist_definitions(FastAPI.openapi(app))
            app.openapi_schema = _exact_bounds(_document_problems(document))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    problems.install(app)
    for routes in (
        ops_routes,
        worker_routes,
        jobs_routes,
        audit_routes,
        operations_routes,
        queues_routes,
        notifications_routes,
    ):
        app.include_router(routes.router)
    dashboard.install(app, services)
    # Outermost last: every answer counted, a client gone before its body was read
    # (not an error), the body deadline, then authentication (before any body is
    # read), then the body size limit, then the hot calls (fast_path).
    app.add_middleware(fast_path.FastPath)
    app.add_middleware(BodyLimit, limit=services.settings.max_body_bytes)
    app.add_middleware(
        auth.Authenticate, authenticator=services.authenticator, throttle=services.throttle
    )
    app.add_middleware(edge.BodyDeadline, seconds=services.settings.body_timeout_seconds)
    app.add_middleware(edge.ClientGone)
    app.add_middleware(request_metrics.RequestMetrics, metrics=services.metrics, routes=app.routes)
    return app
