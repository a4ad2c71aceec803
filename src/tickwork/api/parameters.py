"""What the routes of people and their tools take alike (the caller, the services, the
tenant an admin token acts for, a page's cursor and size) and how they document the
problems they answer: one declaration each, so the contract says the same of every
route that takes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

from fastapi import Depends, Query

from tickwork.api import models
from tickwork.api.auth import Principal
from tickwork.api.services import Services, principal, services_dependency
from tickwork.core import limits

Caller = Annotated[Principal, Depends(principal)]
Svc = Annotated[Services, Depends(services_dependency)]
TenantParam = Annotated[
    str | None,
    Query(
        description="Admin tokens only: act for this tenant.",
        json_schema_extra=models.TENANT_SCHEMA,
    ),
]
Limit = Annotated[
    int | None,
    Query(
        ge=1,
        le=limits.MAX_PAGE_SIZE,
        description=f"Page size (default {limits.DEFAULT_PAGE_SIZE}).",
    ),
]
Cursor = Annotated[str | None, Query(description="nextCursor of the previous page.")]

# A route's documented answers, as FastAPI's ``responses`` takes them.
Responses = dict[int | str, dict[str, Any]]


def problems(descriptions: Mapping[int, str]) -> Responses:
    """Each status answered with a Problem, described by the slugs it carries."""
    return {
        status: {"model": models.Problem, "description": description}
        for status, description in descriptions.items()
    }


# What a route that acts for a tenant on a named resource can be refused with.
ERRORS: Final[Responses] = problems(
    {
        400: "invalid-request",
        401: "unauthenticated",
        403: "forbidden",
        404: "not-found",
    }
)
