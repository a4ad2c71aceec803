"""Kubernetes ``Status`` errors, shaped as the API server shapes them.

Clients branch on ``code`` and ``reason`` (Kopf's ``APIConflictError``, the official
client's ``ApiException.status``, kubectl's messages), so each constructor here copies
the real server's code, reason and message wording.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One ``field.Error``: ``spec.replicas: Invalid value: "x": must be ...``."""

    field: str
    reason: str  # FieldValueInvalid, FieldValueRequired, ...
    message: str  # the part after "field: "

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def show(value: Any) -> str:
    """A value as Go's ``%#v``-ish printing in field errors shows it."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return str(value)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, "FieldValueInvalid", f"Invalid value: {show(value)}: {detail}")


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, "FieldValueTypeInvalid", f"Invalid value: {show(value)}: {detail}")


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(
        field, "FieldValueRequired", "Required value" + (f": {detail}" if detail else "")
    )


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(field, "FieldValueForbidden", f"Forbidden: {detail}")


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError(field, "FieldValueDuplicate", f"Duplicate value: {show(value)}")


def not_supported(field: str, value: Any, allowed: list[Any]) -> FieldError:
    values = ", ".join(show(v) for v in allowed)
    return FieldError(
        field,
        "FieldValueNotSupported",
        f"Unsupported value: {show(value)}: supported values: {values}",
    )


def too_long(field: str, limit: int) -> FieldError:
    return FieldError(field, "FieldValueTooLong", f"Too long: may not be more than {limit} bytes")


def too_many(field: str, actual: int, limit: int) -> FieldError:
    return FieldError(
        field, "FieldValueTooMany", f"Too many: {actual}: must have at most {limit} items"
    )


class ApiError(Exception):
    """An error answered as a ``Status`` object with an HTTP code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else REASONS.get(code, "Unknown")
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(name: str | None, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {"group": group, "kind": kind} if group else {"kind": kind}
    if name:
        details = {"name": name, **details}
    return details


def not_found(group_resource: str, name: str, group: str, plural: str) -> ApiError:
    return ApiError(
        404, f'{group_resource} "{name}" not found', details=_details(name, group, plural)
    )


def already_exists(group_resource: str, name: str, group: str, plural: str) -> ApiError:
    return ApiError(
        409,
        f'{group_resource} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(name, group, plural),
    )


def conflict(
    group_resource: str, name: str, group: str, plural: str, why: str | None = None
) -> ApiError:
    why = (
        why
        or "the object has been modified; "
        "please apply your changes to the latest version and try again"
    )
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {group_resource} "{name}": {why}',
        details=_details(name, group, plural),
    )


def invalid_object(
    kind_group: str, name: str, group: str, kind: str, errors: list[FieldError]
) -> ApiError:
    shown = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
    details = _details(name, group, kind)
    details["causes"] = [
        {"reason": e.reason, "message": e.message, "field": e.field} for e in errors
    ]
    return ApiError(422, f'{kind_group} "{name}" is invalid: {shown}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, message)


def internal(message: str) -> ApiError:
    return ApiError(500, f"Internal error occurred: {message}")


def for_code(code: int, message: str | None = None, reason: str | None = None) -> ApiError:
    """A scripted fault's answer: the server's generic wording for that code."""
    generic = {
        400: "the server rejected our request for an unknown reason",
        401: "Unauthorized",
        403: "forbidden",
        404: "the server could not find the requested resource",
        409: "the server reported a conflict",
        410: "the resource version is too old",
        422: "the server rejected our request due to an error in our request",
        429: "the server has received too many requests and has asked us to try again later",
        500: "Internal error occurred: scripted fault",
        503: "the server is currently unable to handle the request",
        504: "the server was unable to return a response in the time allotted",
    }
    headers = {"Retry-After": "1"} if code in (429, 503) else None
    return ApiError(
        code, message or generic.get(code, f"scripted fault {code}"), reason=reason, headers=headers
    )
