"""What the dashboard changes, and signing in and out.

Every action is a POST of a form that carries the session's CSRF token; it calls the
engine function the HTTP API calls, with the signed-in principal as the actor (so the
audit log names who did it), then redirects back with a one-line notice: the problem's
``detail`` when the engine refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from tickwork.api import access, parameters
from tickwork.api.access import Operation
from tickwork.api.services import services
from tickwork.api.ui import sessions, web
from tickwork.api.ui.pages import owned_run
from tickwork.core import preconditions
from tickwork.core.errors import (
    Forbidden,
    InvalidRequest,
    PreconditionFailed,
    TickworkError,
    TooManyAuthFailures,
)
from tickwork.core.records import Run, State
from tickwork.engine.jobs import EnqueueRequest

router = APIRouter(prefix="/ui", include_in_schema=False)

MAX_SELECTED: Final = 500

Action = Callable[[web.Viewer, web.Form], Awaitable[Response]]


async def act(request: Request, action: Action, default_next: str = "/ui/") -> Response:
    """Check the session and the CSRF token, run ``action``; a refusal comes back as a
    notice on the page the form was on."""
    try:
        # The session first: nobody without one gets the body read.
        principal, session = await web.signed_in(request)
        fields = await web.form(request)
        who = web.admitted(principal, session, fields.get("tenant"))
    except web.SignInNeeded:
        return web.sign_in_redirect(request)
    except TickworkError as error:
        return await web.problem_page(request, error, None)
    try:
        web.check_csrf(request, who.session.session_id, fields.get("csrf"))
    except web.CsrfRefused as error:
        return await web.problem_page(request, error, who, back=web.here(request))
    back = web.local_path(fields.get("next"), default_next)
    try:
        return await action(who, fields)
    except TickworkError as error:
        return web.redirect(request, back, ("error", error.detail))


def _back(fields: web.Form, default: str = "/ui/") -> str:
    return web.local_path(fields.get("next"), default)


# Signing in and out


@router.get("/login")
async def login_form(request: Request) -> Response:
    ui = web.dashboard(request)
    next_path = web.local_path(request.query_params.get("next"))
    if ui.sealer.session(request.cookies.get(sessions.SESSION_COOKIE)) is not None:
        try:
            await web.signed_in(request)
        except (web.SignInNeeded, TickworkError):
            pass
        else:
            return web.redirect(request, next_path)
    return await _login_page(request, next_path, None, 200)


async def _login_page(
    request: Request, next_path: str, problem: str | None, status: int
) -> Response:
    ui = web.dashboard(request)
    nonce, sealed = ui.sealer.login_nonce()
    context = {
        "title": "Sign in",
        "next_path": next_path,
        "problem": problem,
        "login_csrf": ui.sealer.csrf_token(nonce),
        "session_hours": round(ui.sealer.session_seconds / 3600, 1),
    }
    response = await web.render(request, "login.html", context, None, status=status)
    web.set_cookie(request, response, sessions.LOGIN_COOKIE, sealed, sessions.LOGIN_SECONDS)
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    ui = web.dashboard(request)
    try:
        fields = await web.form(request)
    except web.CsrfRefused as error:
        return await web.problem_page(request, error, None, back="/ui/login")
    next_path = web.local_path(fields.get("next"))
    nonce = ui.sealer.login_nonce_of(request.cookies.get(sessions.LOGIN_COOKIE))
    if nonce is None or not ui.sealer.csrf_ok(nonce, fields.get("csrf")):
        detail = "the sign-in form expired or came from another site; try again"
        return await _login_page(request, next_path, detail, 403)
    try:
        web.check_csrf(request, nonce, fields.get("csrf"))
    except web.CsrfRefused as error:
        return await _login_page(request, next_path, error.detail, 403)
    svc = services(request)
    host = request.client.host if request.client else None
    try:
        # The API's own throttle: the sign-in form is no faster way to guess tokens.
        svc.throttle.check(host)
    except TooManyAuthFailures as error:
        return await _login_page(request, next_path, error.detail, 429)
    token = (fields.get("token") or "").strip()
    principal = await svc.authenticator.authenticate(token) if token else None
    if principal is None:
        svc.throttle.failed(host)
        return await _login_page(request, next_path, "unknown token", 401)
    try:
        access.admit(principal, Operation.use_dashboard)
    except Forbidden:
        detail = (
            f"a {principal.role.value} token cannot sign in to the dashboard: use a team or "
            "admin token"
        )
        return await _login_page(request, next_path, detail, 403)
    _, sealed = ui.sealer.new_session(token)
    response = web.redirect(request, next_path)
    web.set_cookie(request, response, sessions.SESSION_COOKIE, sealed, ui.sealer.session_seconds)
    web.clear_cookie(request, response, sessions.LOGIN_COOKIE)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    async def action(who: web.Viewer, _fields: web.Form) -> Response:
        web.dashboard(request).sealer.end(who.session)
        response = web.redirect(request, "/ui/login", ("ok", "Signed out."))
        web.clear_cookie(request, response, sessions.SESSION_COOKIE)
        return response

    return await act(request, action)


# Jobs


def _pause(paused: bool) -> Callable[[str, Request], Awaitable[Response]]:
    async def route(name: str, request: Request) -> Response:
        async def action(who: web.Viewer, fields: web.Form) -> Response:
            await web.allow(who, Operation.pause_job, parameters.job_name(name))
            # The page's tag: a job changed since it was shown is not acted on blindly (its
            # new pause may have a reason this page never showed).
            shown = fields.get("etag")
            precondition = preconditions.Precondition.of(shown) if shown else preconditions.NONE
            try:
                await services(request).jobs.set_paused(
                    who.tenant, name, paused, who.actor, precondition=precondition
                )
            except PreconditionFailed as error:
                raise PreconditionFailed(
                    f"{name} changed since this page was shown: nothing done. Look at it "
                    "again, then pause or resume it."
                ) from error
            verb = "Paused" if paused else "Resumed"
            return web.redirect(request, _back(fields), ("ok", f"{verb} {name}."))

        return await act(request, action)

    return route


for _verb, _paused in (("pause", True), ("resume", False)):
    router.post(f"/jobs/{{name}}/{_verb}", name=_verb)(_pause(_paused))


def _queue(paused: bool) -> Callable[[str, Request], Awaitable[Response]]:
    async def route(queue: str, request: Request) -> Response:
        svc = services(request)

        async def action(who: web.Viewer, fields: web.Form) -> Response:
            await web.allow(who, Operation.pause_queue, queue)
            parameters.queue_name(queue)
            queues = svc.queues
            if paused:
                await queues.pause(who.tenant, queue, who.actor)
                text = f"Paused queue {queue}: its runs wait until it is resumed."
            else:
                await queues.resume(who.tenant, queue, who.actor)
                text = f"Resumed queue {queue}."
            return web.redirect(request, _back(fields), ("ok", text))

        return await act(request, action)

    return route


for _verb, _paused in (("pause", True), ("resume", False)):
    router.post(f"/queues/{{queue}}/{_verb}", name=f"{_verb}_queue")(_queue(_paused))


@router.post("/jobs/{name}/enqueue")
async def enqueue(name: str, request: Request) -> Response:
    svc = services(request)

    async def action(who: web.Viewer, fields: web.Form) -> Response:
        await web.allow(who, Operation.enqueue, parameters.job_name(name))
        if svc.quota is not None:
            await svc.quota.admit(who.tenant, 1)
        run, created = await svc.jobs.enqueue(who.tenant, name, EnqueueRequest(), who.actor)
        if created:
            svc.metrics.enqueued.inc()
        text = f"Enqueued run {run.run_id} of {name}: {run.state.value.replace('_', ' ')}."
        if run.answered_by == "unique":
            text = (
                f"Deduplicated: run {run.run_id} of {name} ({run.state.value.replace('_', ' ')})"
                " holds the unique key of this enqueue; no run was made."
            )
        elif run.answered_by == "debounce":
            text = (
                f"Debounced: run {run.run_id} of {name}, not started yet, now starts "
                f"{run.ready_at.isoformat(timespec='seconds')}; no run was made."
            )
        elif not created:
            text = f"Run {run.run_id} of {name} already exists."
        return web.redirect(request, _back(fields), ("ok", text))

    return await act(request, action)


# Runs


@router.post("/runs/{run_id}/cancel")
async def cancel(run_id: str, request: Request) -> Response:
    svc = services(request)

    async def action(who: web.Viewer, fields: web.Form) -> Response:
        _, _, scope = await owned_run(request, who, run_id, Operation.cancel_run)
        run = await svc.jobs.cancel(run_id, who.actor, scope)
        text = (
            f"Asked the worker to stop run {run.run_id}."
            if run.state is State.leased
            else f"Run {run.run_id} is {run.state.value}."
        )
        return web.redirect(request, _back(fields), ("ok", text))

    return await act(request, action)


# The DLQ


def _selection(fields: web.Form) -> tuple[str, list[str]]:
    """The verb and run ids of a DLQ form: a row's own button or the checked rows."""
    one = fields.get("one")
    if one:
        verb, _, run_id = one.partition(":")
        chosen = [run_id]
    else:
        verb = fields.get("action") or ""
        chosen = list(dict.fromkeys(fields.all("run")))
    if verb not in ("replay", "discard"):
        raise InvalidRequest("choose replay or discard", field="action")
    if not chosen or not all(chosen):
        raise InvalidRequest("select at least one dead run", field="run")
    if len(chosen) > MAX_SELECTED:
        raise InvalidRequest(f"select at most {MAX_SELECTED} runs at once", field="run")
    return verb, chosen


@router.post("/dlq/confirm")
async def confirm(request: Request) -> Response:
    async def action(who: web.Viewer, fields: web.Form) -> Response:
        verb, chosen = _selection(fields)
        found: list[Run] = []
        missing: list[str] = []
        for run_id in chosen:
            try:
                run, _, _ = await owned_run(request, who, run_id, Operation.settle_dead)
            except TickworkError:
                missing.append(run_id)
                continue
            if run.state is State.dead:
                found.append(run)
            else:
                missing.append(run_id)
        if not found:
            raise InvalidRequest("none of the selected runs is dead any more", field="run")
        context = {
            "title": f"{verb.capitalize()} dead runs",
            "section": "dlq",
            "verb": verb,
            "runs": found,
            "missing": missing,
            "next_path": _back(fields, "/ui/dlq"),
        }
        return await web.render(request, "confirm.html", context, who)

    return await act(request, action, "/ui/dlq")


async def _settle(request: Request, verb: str) -> Response:
    svc = services(request)
    operation = svc.jobs.replay if verb == "replay" else svc.jobs.discard

    async def action(who: web.Viewer, fields: web.Form) -> Response:
        chosen = list(dict.fromkeys(fields.all("run")))
        if not chosen or len(chosen) > MAX_SELECTED:
            raise InvalidRequest(f"select 1 to {MAX_SELECTED} dead runs", field="run")
        done, refused = 0, []
        for run_id in chosen:
            try:
                _, _, scope = await owned_run(request, who, run_id, Operation.settle_dead)
                await operation(run_id, who.actor, scope)
                done += 1
            except TickworkError as error:
                refused.append(error.detail)
        past = "Replayed" if verb == "replay" else "Discarded"
        text = f"{past} {done} run{'' if done == 1 else 's'}."
        if refused:
            text += f" Refused {len(refused)}: " + "; ".join(refused[:5])
        kind = "error" if refused else "ok"
        return web.redirect(request, _back(fields, "/ui/dlq"), (kind, text))

    return await act(request, action, "/ui/dlq")


@router.post("/dlq/replay")
async def replay(request: Request) -> Response:
    return await _settle(request, "replay")


@router.post("/dlq/discard")
async def discard(request: Request) -> Response:
    return await _settle(request, "discard")
