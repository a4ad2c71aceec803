"""A tenant's notification targets: webhooks told about dead runs and auto-paused jobs
(team and admin tokens). The HMAC key is named by reference (an environment variable or
a file of the scheduler's), never sent in a body nor shown (``engine.notifications``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Path, Request
from pydantic import ConfigDict, Field, StrictBool, StrictStr, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError
from starlette.responses import Response

from tickwork.api import access, bodies, responses
from tickwork.api.access import Operation
from tickwork.api.models import NAME_SCHEMA, Model
from tickwork.api.parameters import ERRORS, Caller, Svc, TenantParam
from tickwork.api.render import wire
from tickwork.core.errors import InvalidRequest, NotFound
from tickwork.core.spec import check_name
from tickwork.engine.notifications import Target

router = APIRouter(prefix="/v1")

TargetName = Annotated[str, Path(description="The target's name.", json_schema_extra=NAME_SCHEMA)]

_MAX_URL_LENGTH: Final = 2048
_MAX_REF_LENGTH: Final = 1024

# The schema's patterns are the checks themselves, so the contract says exactly what is
# taken: a host that starts with a letter or digit, printable ASCII, no space.
_URL_RE: Final = re.compile(r"https?://[A-Za-z0-9][!-~]*")
_ENV_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ABSOLUTE_RE: Final = re.compile(r"/.*", re.DOTALL)
_MAX_ENV_LENGTH: Final = 255


def _matching(value: str | None, pattern: re.Pattern[str], limit: int, reason: str) -> str:
    if value is None or len(value) > limit or not pattern.fullmatch(value):
        raise PydanticCustomError("invalid_reference", reason)
    return value


class SecretRef(Model):
    """Where the scheduler reads the HMAC key: exactly one of `env` and `file`."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})

    env: StrictStr | SkipJsonSchema[None] = Field(
        default=None,
        description="An environment variable of the scheduler process.",
        json_schema_extra={"pattern": f"^{_ENV_RE.pattern}$", "maxLength": _MAX_ENV_LENGTH},
    )
    file: StrictStr | SkipJsonSchema[None] = Field(
        default=None,
        description="An absolute path of a file the scheduler reads (a mounted Secret).",
        json_schema_extra={"pattern": "^/", "maxLength": _MAX_REF_LENGTH},
    )

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: str | None) -> str:
        return _matching(
            value, _ENV_RE, _MAX_ENV_LENGTH, "an environment variable name: letters, digits, '_'"
        )

    @field_validator("file")
    @classmethod
    def _check_file(cls, value: str | None) -> str:
        return _matching(value, _ABSOLUTE_RE, _MAX_REF_LENGTH, "an absolute path")

    @model_validator(mode="after")
    def _one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise PydanticCustomError("secret_ref", "give exactly one of env and file")
        return self


class TargetRequest(Model):
    """A notification target: where the notifications go, and how."""

    url: StrictStr = Field(
        description="The webhook: an http or https URL the scheduler posts to.",
        json_schema_extra={"maxLength": _MAX_URL_LENGTH, "pattern": f"^{_URL_RE.pattern}$"},
    )
    format: Literal["json", "slack"] = Field(
        default="json",
        description="`json`: the notification as a JSON object; `slack`: a Slack "
        'incoming-webhook message (`{"text": …}`).',
    )
    secret_ref: SecretRef | None = Field(
        default=None,
        description="The HMAC-SHA256 key the body is signed with (X-Tickwork-Signature), "
        "by reference. Absent: bodies are not signed.",
    )
    default: StrictBool = Field(
        default=False,
        description="Used for every job of the tenant without a `notify` of its own (one "
        "default per tenant: making one the default unmakes the other).",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _matching(value, _URL_RE, _MAX_URL_LENGTH, "an http or https URL with a host")


class TargetView(Model):
    name: str
    url: str
    format: Literal["json", "slack"]
    secret_ref: dict[str, str] | None = Field(description="Where the key is read, not the key.")
    default: bool
    updated_at: datetime
    updated_by: str


class TargetPage(Model):
    items: list[TargetView]
    next_cursor: None = Field(description="Always null: every target of the tenant is listed.")


def render(target: Target) -> dict[str, Any]:
    fields = ("name", "url", "format", "secret_ref", "default", "updated_at")
    return wire(target, *fields, updatedBy="actor")


def _checked(name: str) -> str:
    try:
        check_name(name)
    except ValueError as error:
        raise InvalidRequest(str(error).replace("job name", "name"), field="name") from error
    return name


@router.get(
    "/notification-targets",
    summary="The tenant's notification targets",
    responses={200: {"model": TargetPage}, **ERRORS},
)
async def list_targets(caller: Caller, svc: Svc, tenant: TenantParam = None) -> Response:
    owner = await access.tenant(caller, Operation.list_targets, tenant)
    found = await svc.targets.list(owner)
    return responses.json({"items": [render(t) for t in found], "nextCursor": None})


@router.get(
    "/notification-targets/{name}",
    summary="One notification target",
    responses={200: {"model": TargetView}, **ERRORS},
)
async def get_target(
    name: TargetName, caller: Caller, svc: Svc, tenant: TenantParam = None
) -> Response:
    owner = await access.tenant(caller, Operation.get_target, tenant, name)
    found = await svc.targets.get(owner, _checked(name))
    if found is None:
        raise NotFound(f"no notification target {name!r}", field="name")
    return responses.json(render(found))


@router.put(
    "/notification-targets/{name}",
    summary="Create or replace a notification target",
    responses={
        200: {"model": TargetView, "description": "Replaced"},
        201: {"model": TargetView, "description": "Created"},
        **ERRORS,
    },
    openapi_extra=bodies.openapi(TargetRequest, required=True),
)
async def put_target(
    name: TargetName, caller: Caller, svc: Svc, request: Request, tenant: TenantParam = None
) -> Response:
    owner = await access.tenant(caller, Operation.put_target, tenant, name)
    _checked(name)
    body = await bodies.model(request, TargetRequest, required=True, named=name)
    assert body is not None
    secret = None if body.secret_ref is None else body.secret_ref.model_dump(exclude_none=True)
    # updated_at is the store's own (the engine clock's) time of the write.
    target = Target(
        name, body.url, body.format, secret, body.default, datetime.now(UTC), caller.subject
    )
    stored, created = await svc.targets.put(owner, target)
    return responses.json(render(stored), 201 if created else 200)


@router.delete(
    "/notification-targets/{name}",
    summary="Delete a notification target (jobs that name it notify nobody)",
    status_code=204,
    responses={204: {"description": "Deleted"}, **ERRORS},
)
async def delete_target(
    name: TargetName, caller: Caller, svc: Svc, tenant: TenantParam = None
) -> Response:
    owner = await access.tenant(caller, Operation.delete_target, tenant, name)
    await svc.targets.delete(owner, _checked(name))
    return Response(status_code=204)
