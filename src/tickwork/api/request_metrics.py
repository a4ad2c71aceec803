"""Every HTTP answer of the API, counted by method, route template and status code
(``tickwork_http_requests_total``) and timed (``tickwork_http_request_duration_seconds``).

The route label is the template (``/v1/runs/{runId}/complete``), never the raw path,
so the series stay bounded whatever ids and names clients send: a path no route
matches counts as ``other``, a method outside the standard ones as ``other``. The
template comes from a matcher built once from the app's routes, not from the route
FastAPI picked, because most of the hot calls never reach FastAPI's router
(``fast_path``) and the answers given before routing (401, 408, 413, 429) have no route
either. The matcher walks the path a segment at a time through dicts, as the router
would choose (the first route whose path and method match, else the first whose path
does: a 405): no regular expression per request. The series of each label set are
looked up once and kept, so a request costs a walk, one increment and one observation.

This middleware is the outermost one, so it sees every answer the app gives, including
the refusals of the layers inside it. A request that ends without an answer counts as
499 (its client went away first, as nginx counts it); one whose exception escapes the
app counts as 500 (the server-error handler answers it so). The connection-level
answers of ``edge.GuardedProtocol`` (431, 503 server-busy, 408 before the headers) never
reach the app and are not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import fastapi.routing
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwork.engine.metrics import Metrics

OTHER: Final = "other"
METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# The status of a request that ended without an answer: its client went away first.
CLIENT_GONE_STATUS: Final = 499


@dataclass(frozen=True, slots=True)
class Route:
    """What the matcher knows of a route: its path as declared (``/ui/{rest:path}``), the
    template it is counted under (``/ui/{rest}``) and its methods (None: any)."""

    path: str
    template: str
    methods: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class _Leaf:
    order: int  # the route's place in the app: the router takes the first that matches
    template: str
    methods: frozenset[str] | None


@dataclass(slots=True)
class _Node:
    literals: dict[str, _Node] = field(default_factory=dict)
    # A segment holding a parameter: (text before it, text after it, next node).
    params: list[tuple[str, str, _Node]] = field(default_factory=list)
    # Templates ending in a ``{name:path}`` parameter here (the rest of the path).
    rests: list[_Leaf] = field(default_factory=list)
    leaves: list[_Leaf] = field(default_factory=list)


def _split_parameter(segment: str) -> tuple[str, str, bool] | None:
    """``(before, after, is_path)`` of a template segment's parameter; None if it has
    none."""
    start = segment.find("{")
    end = segment.find("}", start)
    if start < 0 or end < 0:
        return None
    _, _, convertor = segment[start + 1 : end].partition(":")
    return segment[:start], segment[end + 1 :], convertor == "path"


class RouteMatcher:
    """The route template of a path and method, as the router would pick it."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self._root = _Node()
        for order, route in enumerate(routes):
            self._add(route.path, _Leaf(order, route.template, route.methods))
        # The answers for paths that are a template themselves (the worker SDK's hot
        # calls: /v1/lease, /v1/runs:complete): at most one entry per template and
        # method, since no other path is kept.
        self._literal: dict[tuple[str, str], str] = {}

    def _add(self, path: str, leaf: _Leaf) -> None:
        node = self._root
        for segment in path.split("/")[1:]:
            parameter = _split_parameter(segment)
            if parameter is None:
                node = node.literals.setdefault(segment, _Node())
                continue
            before, after, is_path = parameter
            if is_path:
                node.rests.append(leaf)
                return
            for known_before, known_after, child in node.params:
                if (known_before, known_after) == (before, after):
                    node = child
                    break
            else:
                child = _Node()
                node.params.append((before, after, child))
                node = child
        node.leaves.append(leaf)

    def template(self, method: str, path: str) -> str:
        known = self._literal.get((method, path))
        if known is not None:
            return known
        template = self._walk(method, path)
        if template == path:
            self._literal[(method, path)] = template
        return template

    def _walk(self, method: str, path: str) -> str:
        found: list[_Leaf] = []
        _collect(self._root, path.split("/"), 1, found)
        if not found:
            return OTHER
        if len(found) == 1:
            return found[0].template  # its method or not (a 405), the one route there
        found.sort(key=lambda leaf: leaf.order)
        for leaf in found:
            if leaf.methods is None or method in leaf.methods:
                return leaf.template
        return found[0].template  # the path matched, the method did not: a 405


def _collect(node: _Node, segments: list[str], at: int, found: list[_Leaf]) -> None:
    if at < len(segments):
        # A path parameter takes the rest of the path: at least the slash before it.
        found.extend(node.rests)
    if at == len(segments):
        found.extend(node.leaves)
        return
    segment = segments[at]
    child = node.literals.get(segment)
    if child is not None:
        _collect(child, segments, at + 1, found)
    for before, after, child in node.params:
        # A parameter is one or more characters of one segment.
        if (
            len(segment) > len(before) + len(after)
            and segment.startswith(before)
            and segment.endswith(after)
        ):
            _collect(child, segments, at + 1, found)


def app_routes(routes: Sequence[BaseRoute]) -> list[Route]:
    """The routes of an app in the order the router tries them (FastAPI from 0.16x
    keeps an included router as one route of its own: its routes are listed through
    ``iter_route_contexts``)."""
    iterate: Callable[[Sequence[BaseRoute]], Iterable[Any]] | None = getattr(
        fastapi.routing, "iter_route_contexts", None
    )
    found: list[Route] = []
    for route in iterate(routes) if iterate is not None else routes:
        path, template = getattr(route, "path", None), getattr(route, "path_format", None)
        if not isinstance(path, str) or not isinstance(template, str):
            continue
        methods = getattr(route, "methods", None)
        found.append(Route(path, template, frozenset(methods) if methods else None))
    return found


class RequestMetrics:
    """Count and time every HTTP answer of ``app`` in ``metrics``."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        routes: Sequence[BaseRoute],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.clock = clock
        # Starlette builds the middleware at the first request, once every route is in.
        self.matcher = RouteMatcher(app_routes(routes))
        # Per method and route: its latency series and its counter series by status.
        self._series: dict[tuple[str, str], tuple[Any, dict[int, Any]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = self.clock()
        status = 0

        async def answered(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, answered)
        except Exception:
            status = status or 500
            raise
        finally:
            self._record(scope, status or CLIENT_GONE_STATUS, self.clock() - start)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        method: str = scope["method"]
        if method not in METHODS:
            method = OTHER
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        route = self.matcher.template(method, path)
        series = self._series.get((method, route))
        if series is None:
            series = self._series[(method, route)] = (
                self.metrics.http_duration.labels(method, route),
                {},
            )
        timer, counters = series
        counter = counters.get(status)
        if counter is None:
            counter = counters[status] = self.metrics.http_requests.labels(
                method, route, str(status)
            )
        counter.inc()
        timer.observe(seconds)
