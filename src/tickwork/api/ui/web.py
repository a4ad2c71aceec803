"""What every dashboard page shares: the signed-in viewer, the tenant it acts for,
forms, CSRF, rendering, security headers and static files.

Pages are server-rendered HTML (Jinja2, autoescaping everything); ``app.js`` fills in
the viewer's local times and refreshes each page's ``#live`` region by asking the
same URL with ``X-Tickwork-Live: 1``, which renders that block alone.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

import jinja2
from fastapi import Request
from starlette.responses import RedirectResponse, Response

from tickwork import __version__
from tickwork.api import access
from tickwork.api.access import Operation
from tickwork.api.auth import Principal, Role
from tickwork.api.services import Services, services
from tickwork.api.ui import sessions, views
from tickwork.core.errors import TickworkError
from tickwork.engine import overview

LIVE_HEADER: Final = "x-tickwork-live"
FORM_TYPE: Final = "application/x-www-form-urlencoded"
MAX_FORM_FIELDS: Final = 1100

# No inline script or style anywhere: pages load app.js and app.css from /ui/static.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: with it, browsers send "Origin: null" on the dashboard's own forms.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
STATIC_TYPES: Final = {
    "app.css": "text/css; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


class SignInNeeded(Exception):
    """No valid session: pages redirect to the sign-in form, live refreshes get 401."""


class CsrfRefused(TickworkError):
    """A form the dashboard did not send, or could not read: nothing was changed."""

    slug = "forbidden"
    status = 403
    title = "Form refused"


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str
    version: str


@dataclass
class Dashboard:
    sealer: sessions.Sealer
    templates: jinja2.Environment
    assets: dict[str, Asset]
    poll_ms: int


@dataclass(frozen=True)
class Viewer:
    """A signed-in person and the tenant the page acts for."""

    principal: Principal
    session: sessions.Session
    tenant: str
    # An admin acting for a tenant named in the URL: every link and form carries it.
    acting_for: bool

    @property
    def is_admin(self) -> bool:
        return self.principal.role is Role.admin

    @property
    def actor(self) -> str:
        return self.principal.subject


@dataclass
class Form:
    fields: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        for key, value in self.fields:
            if key == name:
                return value
        return None

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.fields if key == name]


def _load_assets() -> dict[str, Asset]:
    folder = resources.files("tickwork.api.ui").joinpath("static")
    assets = {}
    for name, media_type in STATIC_TYPES.items():
        body = folder.joinpath(name).read_bytes()
        assets[name] = Asset(body, media_type, hashlib.sha256(body).hexdigest()[:12])
    return assets


def build(svc: Services) -> Dashboard:
    settings = svc.settings
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("tickwork.api.ui", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.globals.update(
        iso=views.iso,
        at=views.at,
        offset=views.offset,
        duration=views.duration,
        relative=views.relative,
        tone=views.tone,
        size=views.size,
        error_message=views.error_message,
        json_view=views.json_view,
        version=__version__,
    )
    return Dashboard(
        sealer=sessions.Sealer(settings.ui_secret, settings.ui_session_seconds),
        templates=environment,
        assets=_load_assets(),
        poll_ms=max(100, int(settings.ui_poll_seconds * 1000)),
    )


def dashboard(request: Request) -> Dashboard:
    found: Dashboard = request.app.state.dashboard
    return found


def secure(response: Response, cache: bool = False) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    if not cache:
        response.headers["Cache-Control"] = "no-store"
    return response


def is_https(request: Request) -> bool:
    return request.url.scheme == "https"


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=sessions.COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=is_https(request),
    )


def clear_cookie(request: Request, response: Response, name: str) -> None:
    response.delete_cookie(
        name,
        path=sessions.COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=is_https(request),
    )


def local_path(value: str | None, default: str = "/ui/") -> str:
    """``value`` if it is a path of the dashboard (never another site), else ``default``."""
    if not value or len(value) > 2000 or "\\" in value or any(ord(c) < 32 for c in value):
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not parts.path.startswith("/ui/"):
        return default
    return value


def here(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


async def signed_in(request: Request) -> tuple[Principal, sessions.Session]:
    """The principal of the request's session cookie, authenticated again through the
    API's authenticator (``SignInNeeded`` without a valid one). Reads no body."""
    ui = dashboard(request)
    session = ui.sealer.session(request.cookies.get(sessions.SESSION_COOKIE))
    if session is None:
        raise SignInNeeded()
    principal = await services(request).authenticator.authenticate(session.token)
    if principal is None:
        raise SignInNeeded()
    access.admit(principal, Operation.use_dashboard)
    return principal, session


def admitted(principal: Principal, session: sessions.Session, tenant: str | None) -> Viewer:
    """The viewer acting for ``tenant`` (its own when None or empty). Each page and
    action then asks ``allow`` for what it shows or does."""
    chosen = access.acting_tenant(principal, Operation.use_dashboard, tenant or None)
    return Viewer(principal, session, chosen, acting_for=chosen != principal.tenant)


async def allow(who: Viewer, operation: Operation, name: str | None = None) -> None:
    """Refuse unless the viewer may do ``operation`` in the tenant it acts for (on the
    job ``name``): the API's own check of the same call (``access``)."""
    await access.tenant(who.principal, operation, who.tenant, name)


async def viewer(request: Request) -> Viewer:
    """The signed-in viewer acting for the URL's ``tenant``."""
    principal, session = await signed_in(request)
    return admitted(principal, session, request.query_params.get("tenant"))


async def form(request: Request) -> Form:
    """The urlencoded body of a POST (the body limit of the app bounds its size)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != FORM_TYPE:
        raise CsrfRefused("the form must be sent as application/x-www-form-urlencoded")
    body = await request.body()
    try:
        text = body.decode("utf-8")
        fields = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError) as error:
        raise CsrfRefused(f"the form could not be read: {error}") from error
    return Form(fields)


def _same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True  # nothing to compare: the CSRF token and SameSite=Strict decide
    expected = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return secrets.compare_digest(origin.encode(), expected.encode())


def check_csrf(request: Request, session_id: str, offered: str | None) -> None:
    if not _same_origin(request):
        raise CsrfRefused("the form came from another site; open the dashboard and try again")
    if not dashboard(request).sealer.csrf_ok(session_id, offered):
        raise CsrfRefused(
            "the form's security token is missing or stale (CSRF check); reload the page "
            "and try again"
        )


def flash(request: Request, response: Response, kind: str, text: str) -> None:
    set_cookie(
        request,
        response,
        sessions.FLASH_COOKIE,
        dashboard(request).sealer.flash(kind, text),
        sessions.FLASH_SECONDS,
    )


def redirect(request: Request, target: str, notice: tuple[str, str] | None = None) -> Response:
    response = RedirectResponse(target, status_code=303)
    if notice is not None:
        flash(request, response, *notice)
    return secure(response)


def url_maker(who: Viewer | None) -> Any:
    def url(path: str, **params: Any) -> str:
        query = {k: v for k, v in params.items() if v not in (None, "")}
        if who is not None and who.acting_for:
            query.setdefault("tenant", who.tenant)
        return path + (f"?{urlencode(query)}" if query else "")

    return url


def is_live(request: Request) -> bool:
    return request.headers.get(LIVE_HEADER) == "1"


async def render(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    who: Viewer | None,
    status: int = 200,
) -> Response:
    ui = dashboard(request)
    compiled = ui.templates.get_template(template)
    values: dict[str, Any] = {
        "title": "tickwork",
        "static": lambda name: f"/ui/static/{name}?v={ui.assets[name].version}",
        "url": url_maker(who),
        "request_path": request.url.path,
        "here": here(request),
        "poll_ms": ui.poll_ms,
        "signed_in": who is not None,
        "flash": None,
    }
    if who is not None:
        values.update(
            tenant=who.tenant,
            acting_for=who.acting_for,
            is_admin=who.is_admin,
            subject=who.principal.subject,
            csrf=ui.sealer.csrf_token(who.session.session_id),
            tenants=[],
        )
    values.update(context)
    live = is_live(request) and "live" in compiled.blocks
    if live:
        body = "".join(compiled.blocks["live"](compiled.new_context(values)))
        return secure(Response(body, status, media_type="text/html; charset=utf-8"))
    if who is not None and who.is_admin:
        values["tenants"] = await overview.tenants(services(request).engine.database)
    # A page's background refresh never takes the notice: one in flight while an action
    # redirects (a sign-out ends the session, so the refresh gets the sign-in page)
    # would clear it before the page it was meant for is shown.
    notice = None if is_live(request) else request.cookies.get(sessions.FLASH_COOKIE)
    if notice:
        values["flash"] = values["flash"] or ui.sealer.flash_of(notice)
    response = Response(compiled.render(values), status, media_type="text/html; charset=utf-8")
    if notice:
        clear_cookie(request, response, sessions.FLASH_COOKIE)
    return secure(response)


async def problem_page(
    request: Request, error: TickworkError, who: Viewer | None, back: str | None = None
) -> Response:
    if is_live(request):
        # The live region keeps what it shows; app.js says updates stopped, and why.
        return secure(Response(error.detail, error.status, media_type="text/plain"))
    context = {"title": error.title, "detail": error.detail, "back": back}
    return await render(request, "error.html", context, who, status=error.status)


def sign_in_redirect(request: Request) -> Response:
    if is_live(request) or request.method != "GET":
        return secure(Response("sign in again", 401, media_type="text/plain"))
    target = "/ui/login?" + urlencode({"next": local_path(here(request))})
    return secure(RedirectResponse(target, status_code=303))
