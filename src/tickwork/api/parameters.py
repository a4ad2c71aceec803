"""What the routes of people and their tools take alike (the caller, the services, the
tenant an admin token acts for, a page's cursor and size) and how they document the
problems they answer: one declaration each, so the contract says the same of every
route that takes them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Query

from tickwork.api import models
from tickwork.api.auth import Principal
from tickwork.api.services import Services, principal, services_dependency
from tickwork.core import limits
from tickwork.core.errors import InvalidRequest, NotFound
from tickwork.core.spec import check_name, check_queue

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


def job_name(name: str) -> str:
    """``name`` if a stored job can have it, else the job is not found."""
    try:
        check_name(name, stored=True)
    except ValueError as error:
        raise NotFound(str(error), field="name") from error
    return name


def queue_name(queue: str) -> str:
    """``queue`` if a queue can have it as its name (400 otherwise)."""
    try:
        check_queue(queue)
    except ValueError as error:
        raise InvalidRequest(str(error), field="queue") from error
    return queue


def job_filter(job: str | None) -> str | None:
    """A ``job`` filter's value (None: no filter); a name no job can have is refused."""
    if job is not None:
        try:
            check_name(job, stored=True)
        except ValueError as error:
            raise InvalidRequest(str(error), field="job") from error
    return job


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


def pause_and_resume(
    router: APIRouter,
    path: str,
    noun: str,
    summaries: tuple[str, str],
    answers: Responses,
    route: Callable[[bool], Callable[..., Any]],
) -> None:
    """Add ``POST {path}:pause`` and ``POST {path}:resume`` (named ``pause_{noun}`` and
    ``resume_{noun}``): ``route(paused)`` makes each, one permission for both."""
    for verb, paused, summary in zip(("pause", "resume"), (True, False), summaries, strict=True):
        router.post(f"{path}:{verb}", name=f"{verb}_{noun}", summary=summary, responses=answers)(
            route(paused)
        )
