"""Every HTTP answer is counted under its route template, whether FastAPI routed the
call or the fast path served it, and every role exports the process collector and the
alerts' series at zero from its start."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any
from unittest import mock

import httpx
import pytest
from conftest import ApiServer
from fastapi.routing import iter_route_contexts
from prometheus_client.parser import text_string_to_metric_families
from starlette.routing import Match
from starlette.types import Message, Receive, Scope, Send

from monitoring.support import lease_and_succeed
from tickwork.api.app import create_app
from tickwork.api.request_metrics import OTHER, RequestMetrics, RouteMatcher, app_routes
from tickwork.core.settings import ApiSettings
from tickwork.engine.metrics import Metrics
from tickwork.operator.leadership import OperatorMetrics

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def label_values(found: Samples, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for sample, labels in found if sample == name}


async def test_fast_path_and_routed_calls_are_counted_by_route_template(
    api_server: ApiServer,
) -> None:
    url = api_server.url
    team = api_server.headers(api_server.team_token)
    worker = api_server.headers(api_server.worker_token)
    async with httpx.AsyncClient(base_url=url) as http:
        put = await http.put("/v1/jobs/nightly", json={"queue": "default"}, headers=team)
        assert put.status_code == 201, put.text
        run = await http.post("/v1/jobs/nightly/runs", json={}, headers=team)  # fast path
        assert run.status_code == 201, run.text
        keyed = {**team, "Idempotency-Key": "k" * 300}  # too long: FastAPI's to refuse
        assert (await http.post("/v1/jobs/nightly/runs", headers=keyed)).status_code == 400
        run_id = await lease_and_succeed(http, "default", worker)
        assert (await http.get(f"/v1/runs/{run_id}", headers=team)).status_code == 200
        assert (await http.get("/v1/jobs/nightly")).status_code == 401  # before any routing
        assert (await http.get("/v1/no/such/thing", headers=team)).status_code == 404
        assert (await http.post("/v1/runs/some-run-id", headers=team)).status_code == 405
        answer = await http.get("/metrics", headers=api_server.headers(api_server.admin_token))
    found = samples(answer.text)

    def requests(method: str, route: str, status: str) -> float | None:
        return value(
            found, "tickwork_http_requests_total", method=method, route=route, status=status
        )

    assert requests("PUT", "/v1/jobs/{name}", "201") == 1
    assert requests("POST", "/v1/jobs/{name}/runs", "201") == 1
    assert requests("POST", "/v1/jobs/{name}/runs", "400") == 1
    assert requests("POST", "/v1/lease", "200") == 1
    assert requests("POST", "/v1/runs/{runId}/complete", "200") == 1
    assert requests("GET", "/v1/runs/{runId}", "200") == 1
    assert requests("GET", "/v1/jobs/{name}", "401") == 1
    assert requests("GET", OTHER, "404") == 1
    assert requests("POST", "/v1/runs/{runId}", "405") == 1
    # No raw path, run id or job name in any label: the series stay bounded.
    templates = {route.template for route in app_routes(create_app(_services()).routes)}
    routes = label_values(found, "tickwork_http_requests_total", "route")
    assert routes <= templates | {OTHER}
    duration = "tickwork_http_request_duration_seconds_count"
    assert value(found, duration, method="POST", route="/v1/lease") == 1
    # The process collector and the platform: what a pod uses.
    assert (value(found, "process_resident_memory_bytes") or 0) > 0
    assert value(found, "process_start_time_seconds") is not None
    assert any(name == "python_info" for name, _ in found)


def _services() -> Any:
    services = mock.MagicMock()
    services.settings = ApiSettings()
    return services


def _sample_paths(path: str) -> Iterator[str]:
    """Concrete paths for a route's path: each parameter filled in, a path parameter
    with one segment and with several."""
    if "{" not in path:
        yield path
        return
    before, _, rest = path.partition("{")
    name, _, after = rest.partition("}")
    fillings = ["a/b", "x"] if name.endswith(":path") else ["r-01", "x"]
    for filling, tail in itertools.product(fillings, _sample_paths(after)):
        yield before + filling + tail


ODD_PATHS = [
    "/",
    "//",
    "/v1",
    "/v1/",
    "/v1/jobs/",
    "/v1/jobs/a:pause",
    "/v1/jobs/:pause",
    "/v1/jobs/a/b/runs",
    "/v1/runs/",
    "/v1/runs/a/b/complete",
    "/v1/runs:nothing",
    "/ui",
    "/ui/",
    "/ui/a/b/c",
    "/ui/static/",
    "/metrics/",
    "/nope",
]


def test_the_matcher_picks_the_route_the_router_picks() -> None:
    """For every route's paths and some odd ones, under every method: the template of
    the first route whose path and method match, else the first whose path does (the
    router's 405), else ``other``."""
    app = create_app(_services())
    contexts = list(iter_route_contexts(app.routes))
    matcher = RouteMatcher(app_routes(app.routes))
    paths = {p for c in contexts for p in _sample_paths(c.path)} | set(ODD_PATHS)
    for path, method in itertools.product(sorted(paths), ["GET", "POST", "PUT", "DELETE"]):
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        full = partial = None
        for context in contexts:
            match, _ = context.original_route.matches(scope)
            if match is Match.FULL:
                full = context.path_format
                break
            if match is Match.PARTIAL and partial is None:
                partial = context.path_format
        assert matcher.template(method, path) == (full or partial or OTHER), (method, path)


async def _call(app: Any, path: str = "/v1/lease") -> None:
    scope = {"type": "http", "method": "POST", "path": path, "root_path": "", "headers": []}

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        return None

    await app(scope, receive, send)


async def test_an_escaping_error_counts_as_500_and_a_gone_client_as_499() -> None:
    metrics = Metrics()
    routes = create_app(_services()).routes

    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    async def silent(scope: Scope, receive: Receive, send: Send) -> None:
        return None  # edge.ClientGone ended it: nobody left to answer

    with pytest.raises(RuntimeError):
        await _call(RequestMetrics(failing, metrics, routes))
    await _call(RequestMetrics(silent, metrics, routes), "/v1/runs/r-1/complete")
    found = samples(metrics.render().decode())
    total = "tickwork_http_requests_total"
    assert value(found, total, method="POST", route="/v1/lease", status="500") == 1
    route = "/v1/runs/{runId}/complete"
    assert value(found, total, method="POST", route=route, status="499") == 1


def test_every_role_exports_its_process_and_the_alerts_series_from_the_start() -> None:
    """A counter series that first appears at 1 reads as no increase: the series the
    alerts read are there at 0 before the first event."""
    found = samples(Metrics().render().decode())
    for priority in ("critical", "default", "bulk"):
        for name in (
            "tickwork_dead_runs_total",
            "tickwork_lease_expiries_total",
            "tickwork_job_leases_total",
        ):
            assert value(found, name, tickwork_job="_other", priority=priority) == 0, name
        bucket = "tickwork_start_lag_seconds_bucket"
        assert value(found, bucket, priority=priority, le="+Inf") == 0
    assert value(found, "tickwork_scheduler_rows_total", step="materialised") == 0
    assert value(found, "tickwork_scheduler_errors_total", kind="outage") == 0
    assert value(found, "process_start_time_seconds") is not None
    operator = samples(OperatorMetrics().render().decode())
    assert value(operator, "process_start_time_seconds") is not None
