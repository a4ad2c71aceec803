"""The dashboard's routes, in the order they match, and its static files."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import RedirectResponse, Response

from tickwork.api.services import Services
from tickwork.api.ui import actions, bulk, pages, web
from tickwork.core.errors import NotFound

_edges = APIRouter(include_in_schema=False)


@_edges.get("/ui")
async def without_slash() -> Response:
    return web.secure(RedirectResponse("/ui/", status_code=308))


@_edges.get("/ui/static/{name}")
async def static(name: str, request: Request) -> Response:
    asset = web.dashboard(request).assets.get(name)
    if asset is None:
        return web.secure(Response("not found", 404, media_type="text/plain"))
    response = Response(asset.body, media_type=asset.media_type)
    # The URL carries the content's hash (?v=...): a new release is a new URL.
    response.headers["Cache-Control"] = "public, max-age=86400"
    return web.secure(response, cache=True)


@_edges.get("/ui/{rest:path}")
async def not_found(rest: str, request: Request) -> Response:
    async def page(who: web.Viewer) -> Response:
        return await web.problem_page(request, NotFound(f"no page /ui/{rest}"), who)

    return await pages.serve(request, page)


def install(app: FastAPI, services: Services) -> None:
    """Serve the dashboard at ``/ui/`` from ``app``."""
    app.state.dashboard = web.build(services)
    app.include_router(actions.router)
    app.include_router(pages.router)
    app.include_router(bulk.router)
    app.include_router(_edges)
