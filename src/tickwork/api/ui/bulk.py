"""The dashboard's bulk operations: a tenant's runs in one state across jobs, replay,
discard or cancel of every run matching a filter (all of them, not the page shown),
and the operations' progress.

The filter is read from a page's query or a form with the checks the API makes
(``core.operations.checked``); the actions call the engine functions behind
``POST /v1/operations`` and ``:cancel``, with the signed-in viewer as the actor.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from tickwork.api.access import Operation
from tickwork.api.operations_routes import OPERATION_ID
from tickwork.api.services import services
from tickwork.api.ui import actions, pages, web
from tickwork.api.ui.run_filter import (
    DEFAULT_STATE,
    FIELDS,
    VERBS,
    actions_for,
    described,
    matching,
    operations_of,
    params_of,
    read_filter,
)
from tickwork.core import operations as core
from tickwork.core.errors import InvalidRequest, NotFound
from tickwork.core.records import State
from tickwork.engine import overview
from tickwork.engine.cursors import Position

router = APIRouter(prefix="/ui", include_in_schema=False)

RECENT: Final = 50


# Pages


@router.get("/runs")
async def runs_page(request: Request) -> Response:
    query = dict(request.query_params)

    async def page(who: web.Viewer) -> Response:
        await web.allow(who, Operation.list_runs)
        problem: str | None = None
        params = {name: query[name] for name in (*FIELDS, "jobPattern") if query.get(name)}
        params.setdefault("state", DEFAULT_STATE)
        runs: list[Any] = []
        total: int | None = None
        next_url = None
        possible: list[core.Action] = []
        try:
            found, params = read_filter(query)
            cursor_text = query.get("cursor")
            cursor = Position.decode(cursor_text) if cursor_text else None
        except InvalidRequest as error:
            problem = error.detail
        else:
            runs, next_cursor = await operations_of(request).runs(
                who.tenant, found, cursor, pages.PAGE_SIZE
            )
            total = await matching(request, who.tenant, found)
            possible = actions_for(found)
            if next_cursor is not None:
                next_url = web.url_maker(who)("/ui/runs", **params, cursor=next_cursor.encode())
        svc = services(request)
        state = params.get("state", DEFAULT_STATE)
        context = {
            "title": "Runs",
            "section": "runs",
            "runs": runs,
            "total": total,
            "problem": problem,
            "params": params,
            "state": state,
            "finished": state in {s.value for s in core.FINISHED_STATES},
            "states": [s.value for s in State],
            "possible": [(a.value, *VERBS[a]) for a in possible],
            "filtered": set(params) - {"state"} != set(),
            "paged": bool(query.get("cursor")),
            "next_url": next_url,
            "now": await svc.now(),
            "job_names": await overview.dead_jobs(svc.engine.database, who.tenant),
        }
        return await web.render(request, "runs.html", context, who, 400 if problem else 200)

    return await pages.serve(request, page)


@router.get("/operations")
async def operations_page(request: Request) -> Response:
    async def page(who: web.Viewer) -> Response:
        await web.allow(who, Operation.list_operations)
        found = await operations_of(request).recent(who.tenant, RECENT)
        svc = services(request)
        context = {
            "title": "Operations",
            "section": "operations",
            "operations": found,
            "verbs": {a.value: VERBS[a] for a in core.Action},
            "now": await svc.now(),
            "described": described,
        }
        return await web.render(request, "operations.html", context, who)

    return await pages.serve(request, page)


def _operation_id(text: str) -> str:
    if not OPERATION_ID.fullmatch(text):
        raise NotFound(f"no operation {text!r}", field="operationId")
    return text


@router.get("/operations/{operation_id}")
async def operation_page(operation_id: str, request: Request) -> Response:
    async def page(who: web.Viewer) -> Response:
        await web.allow(who, Operation.get_operation)
        found = await operations_of(request).get(who.tenant, _operation_id(operation_id))
        svc = services(request)
        params = params_of(found.filter)
        context = {
            "title": f"Operation {found.id}",
            "section": "operations",
            "op": found,
            "verb": VERBS[found.action],
            "filter_lines": described(found.filter, found.action),
            "runs_url": web.url_maker(who)("/ui/runs", **params) if "state" in params else None,
            "now": await svc.now(),
        }
        return await web.render(request, "operation.html", context, who)

    return await pages.serve(request, page)


# Actions


def _action(fields: web.Form) -> core.Action:
    try:
        return core.Action(fields.get("action") or "")
    except ValueError:
        raise InvalidRequest("choose replay, discard or cancel", field="action") from None


@router.post("/operations/confirm")
async def confirm(request: Request) -> Response:
    async def action(who: web.Viewer, fields: web.Form) -> Response:
        chosen = _action(fields)
        await web.allow(who, Operation.create_operation)
        found, params = read_filter(dict(fields.fields), chosen)
        total = await operations_of(request).count(who.tenant, chosen, found)
        if total == 0:
            raise InvalidRequest("no run matches this filter now: nothing to do", field="filter")
        context = {
            "title": f"{VERBS[chosen][0]} {total} runs",
            "section": "operations",
            "kind": "create",
            "action": chosen.value,
            "verb": VERBS[chosen],
            "total": total,
            "filter_lines": described(found, chosen),
            "params": params,
            "next_path": web.local_path(fields.get("next"), "/ui/dlq"),
        }
        return await web.render(request, "bulk_confirm.html", context, who)

    return await actions.act(request, action, "/ui/dlq")


@router.post("/operations")
async def create(request: Request) -> Response:
    async def action(who: web.Viewer, fields: web.Form) -> Response:
        chosen = _action(fields)
        await web.allow(who, Operation.create_operation)
        found, _ = read_filter(dict(fields.fields), chosen)
        made = await operations_of(request).create(who.tenant, chosen, found, who.actor)
        noun = "run" if made.total == 1 else "runs"
        text = f"{VERBS[chosen][0]} of {made.total} {noun} started as {made.id}."
        if made.total == 0:
            text = f"No run matched any more: {made.id} had nothing to do."
        target = web.url_maker(who)(f"/ui/operations/{made.id}")
        return web.redirect(request, target, ("ok", text))

    return await actions.act(request, action, "/ui/operations")


@router.post("/operations/{operation_id}/confirm-cancel")
async def confirm_cancel(operation_id: str, request: Request) -> Response:
    async def action(who: web.Viewer, fields: web.Form) -> Response:
        await web.allow(who, Operation.cancel_operation)
        found = await operations_of(request).get(who.tenant, _operation_id(operation_id))
        context = {
            "title": f"Stop {found.id}",
            "section": "operations",
            "kind": "cancel",
            "op": found,
            "verb": VERBS[found.action],
            "filter_lines": described(found.filter, found.action),
            "next_path": web.local_path(fields.get("next"), f"/ui/operations/{found.id}"),
        }
        return await web.render(request, "bulk_confirm.html", context, who)

    return await actions.act(request, action, "/ui/operations")


@router.post("/operations/{operation_id}/cancel")
async def cancel(operation_id: str, request: Request) -> Response:
    async def action(who: web.Viewer, fields: web.Form) -> Response:
        await web.allow(who, Operation.cancel_operation)
        found = await operations_of(request).cancel(who.tenant, _operation_id(operation_id))
        text = (
            f"Stopped {found.id} after {found.processed} of {found.total} runs: what it did "
            "stays done."
            if found.state is core.OperationState.cancelled
            else f"{found.id} had finished already ({found.state.value})."
        )
        target = web.url_maker(who)(f"/ui/operations/{found.id}")
        return web.redirect(request, target, ("ok", text))

    return await actions.act(request, action, "/ui/operations")
