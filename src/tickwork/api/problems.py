"""Every error as ``application/problem+json`` (RFC 9457) with the contract's slugs."""

from __future__ import annotations

import logging
import math
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from tickwork.api import render
from tickwork.core.errors import (
    InvalidRequest,
    InvalidSchedule,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    TickworkError,
)

logger = logging.getLogger(__name__)

MEDIA_TYPE: Final = "application/problem+json"


class MethodNotAllowed(TickworkError):
    slug = "method-not-allowed"
    status = 405
    title = "Method not allowed"


def response(error: TickworkError) -> Response:
    headers = None
    if isinstance(error, QuotaExceeded):
        headers = {"Retry-After": str(max(1, math.ceil(error.retry_after)))}
    return Response(
        render.dumps(render.problem(error)), error.status, headers=headers, media_type=MEDIA_TYPE
    )


def field_of(location: tuple[int | str, ...] | list[int | str]) -> str | None:
    """``("body", "schedule", "cron")`` → ``"schedule.cron"``; list indexes as ``[n]``."""
    parts = list(location)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("function-after", "function-before") or "[" in str(part):
            continue
        else:
            text += ("." if text else "") + str(part)
    return text or None


def from_validation(errors: list[Any] | tuple[Any, ...]) -> TickworkError:
    """The problem for a list of pydantic errors: the first error decides the type."""
    first = errors[0]
    field = field_of(tuple(first.get("loc", ())))
    kind = first.get("type", "")
    message = first.get("msg", "invalid value")
    context = first.get("ctx") or {}
    if kind == "payload_credential" and isinstance(context.get("path"), str):
        # The credential's place inside the payload: payload.db.password.
        inner = context["path"]
        field = ((field or "") + inner).lstrip(".") or None
        message = message.removeprefix(inner + ": ")
    detail = f"{field}: {message}" if field else message
    if kind == "invalid_schedule":
        return InvalidSchedule(detail, field=field)
    if kind == "payload_too_large":
        return PayloadTooLarge(detail, field=field)
    return InvalidRequest(detail, field=field)


def install(app: FastAPI) -> None:
    async def tickwork_error(_request: Request, error: Exception) -> Response:
        assert isinstance(error, TickworkError)
        return response(error)

    async def validation_error(_request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        return response(from_validation(list(error.errors())))

    async def http_error(_request: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        # FastAPI wraps whatever failed while reading the body (our body limit among
        # them) in a 400 "error parsing the body": answer the underlying problem.
        if isinstance(error.__cause__, TickworkError):
            return response(error.__cause__)
        if error.status_code == 400:
            return response(InvalidRequest(str(error.detail)))
        if error.status_code == 404:
            return response(NotFound("no such resource"))
        if error.status_code == 405:
            return response(MethodNotAllowed("method not allowed on this resource"))
        if error.status_code == 413:
            return response(PayloadTooLarge(str(error.detail)))
        problem = TickworkError(str(error.detail))
        body = render.problem(problem) | {"status": error.status_code, "title": "HTTP error"}
        return Response(render.dumps(body), error.status_code, media_type=MEDIA_TYPE)

    async def unexpected(_request: Request, error: Exception) -> Response:
        logger.exception("unhandled error", extra={"action": "internal-error"})
        return response(TickworkError("internal error; see the server log"))

    app.add_exception_handler(TickworkError, tickwork_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
