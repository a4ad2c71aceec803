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
from tickwork.core import spec
from tickwork.core.errors import (
    AuthUnavailable,
    InvalidRequest,
    InvalidSchedule,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    ServerBusy,
    StoreUnavailable,
    TickworkError,
    TooManyAuthFailures,
)
from tickwork.engine import outages

logger = logging.getLogger(__name__)

MEDIA_TYPE: Final = "application/problem+json"


class MethodNotAllowed(TickworkError):
    slug = "method-not-allowed"
    status = 405
    title = "Method not allowed"


# Seconds a client is asked to wait before repeating a call the store could not serve.
STORE_RETRY_AFTER: Final = 1.0


def headers_of(error: TickworkError) -> dict[str, str]:
    if isinstance(
        error,
        QuotaExceeded | StoreUnavailable | ServerBusy | AuthUnavailable | TooManyAuthFailures,
    ):
        return {"Retry-After": str(max(1, math.ceil(error.retry_after)))}
    return {}


def response(error: TickworkError) -> Response:
    return Response(
        render.dumps(render.problem(error)),
        error.status,
        headers=headers_of(error) or None,
        media_type=MEDIA_TYPE,
    )


def store_unavailable(error: BaseException) -> StoreUnavailable:
    """The problem for a store outage; the detail names the failure, not the DSN."""
    return StoreUnavailable(
        f"the database is unavailable ({outages.describe(error)}); try again shortly",
        retry_after=STORE_RETRY_AFTER,
    )


def outage_response(request: Request, error: BaseException) -> Response:
    """The 503 for a store outage (``outages.is_outage``), logged with the call."""
    logger.warning(
        "%s %s: store unavailable: %s",
        request.method,
        request.url.path,
        outages.describe(error),
        extra={"action": "store-unavailable"},
    )
    return response(store_unavailable(error))


def from_validation(errors: list[Any] | tuple[Any, ...]) -> TickworkError:
    """The problem for a list of pydantic errors: the first error decides the type."""
    first = errors[0]
    field = spec.error_field(first)
    kind = first.get("type", "")
    message = spec.error_message(first)
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

    async def outage(request: Request, error: Exception) -> Response:
        if not outages.is_outage(error):
            return await unexpected(request, error)
        return outage_response(request, error)

    app.add_exception_handler(TickworkError, tickwork_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    # Registered by class, these are answered by the exception middleware like any
    # problem (the catch-all below answers too, but then drops the connection).
    for candidate in outages.CANDIDATES:
        app.add_exception_handler(candidate, outage)
    app.add_exception_handler(Exception, unexpected)
