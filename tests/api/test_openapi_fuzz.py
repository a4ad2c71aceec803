"""Schemathesis over /openapi.json, the contract checked both ways, on both code paths.

- No generated request, valid or not, gets a 5xx.
- Every answer keeps to the document: a documented status, the documented content type,
  a body of the documented schema (fields, types, formats, nullability).
- A request generated from the document (positive data) is not refused as malformed
  (400 invalid-request), but for the few rules JSON Schema cannot say (``BEYOND_SCHEMA``);
  404, 409, 422 and 429 are state, not shape.

The hot calls (``fast_path``) skip FastAPI's routing and parse and render by hand, so
they are checked twice: through the app as served, and through one whose fast path has
empty tables. A scripted walk through a job's life on each gets every response shape
(a retry's ``nextAttemptAt``, a batch's problems, a finished attempt) checked too, which
random data alone would seldom reach.

The server runs in the test's event loop, so the (blocking) schemathesis calls run in a
worker thread while the loop keeps serving them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from conftest import ApiServer
from fastapi import FastAPI
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.middleware import Middleware

from api.clients import PROBLEMS, client, wire_fields
from tickwork.api import fast_path, models
from tickwork.api.app import create_app
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.engine import metrics, readiness
from tickwork.engine.installation import Installation

EXAMPLES_PER_OPERATION = 15

CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]
CHECKS = [not_a_server_error, *CONFORMANCE]

# What the server checks that JSON Schema cannot say: a positive request refused naming
# such a field (fullmatch), for such a reason (searched in the detail), is no mismatch.
_ITEM = r"((runs|items)\[\d+\]\.)?"
BEYOND_SCHEMA: list[tuple[re.Pattern[str], re.Pattern[str]]] = [
    # Bulk operations' filters: bounds set by another field, and the states an action
    # acts on (docs/http-api.md, Operations).
    (re.compile(r"(filter\.)?to"), re.compile(r"from must be before to")),
    (re.compile(r"(filter\.)?maxAttempts"), re.compile(r"must not be above maxAttempts")),
    (re.compile(r"(filter\.)?state"), re.compile(r"acts on runs that are")),
    (re.compile(r"jobPattern"), re.compile(r"give job or jobPattern, not both")),
    # Opaque: only a cursor the server wrote is one.
    (re.compile(r"cursor"), re.compile(r"malformed cursor")),
    # retry.maxSeconds at least retry.baseSeconds: a bound set by another field.
    (re.compile(r"retry"), re.compile(r"maxSeconds must be at least retry\.baseSeconds")),
    # unique and debounce (docs/flow-control.md): rules across fields, and keys read from
    # the payload of the job's runs.
    (re.compile(r"unique\.(states|forSeconds)"), re.compile(r"retry_wait|finished|twice")),
    (re.compile(r"debounce(\.maxSeconds)?"), re.compile(r"debounce\.seconds|at most one of")),
    (re.compile(_ITEM + r"payload"), re.compile(r"the job's (unique|debounce)\.key points")),
    (re.compile(_ITEM + r"(runAt|delaySeconds)"), re.compile(r"debounces its enqueues")),
    # A completion's delaySeconds: required with outcome snoozed, refused with the others.
    (
        re.compile(_ITEM + r"delaySeconds"),
        re.compile(r"delaySeconds (is required|is for outcome 'snoozed' only)"),
    ),
    # A payload that looks like it holds a secret (docs/http-api.md, "Payloads and secrets").
    (re.compile(_ITEM + r"payload[.\[].*"), re.compile(r"must not carry secrets")),
    # What jsonb stores of a payload or an error object: numbers within 64 bits, 32 levels.
    (
        re.compile(_ITEM + r"(payload|error)"),
        re.compile(r"numbers must fit in 64 bits|nests deeper than"),
    ),
    # An RFC 3339 instant whose offset takes it out of years 1-9999 in UTC.
    (re.compile(_ITEM + r"runAt"), re.compile(r"years 1-9999")),
    # concurrencyKey needs a concurrency limit: a rule across two fields.
    (re.compile(r"concurrencyKey"), re.compile(r"needs a concurrency limit")),
    # Backfill: to after from and not after now (a bound set by the clock).
    (re.compile(r"to"), re.compile(r"to must be after from|to is in the future")),
    # A backfill of a job without a schedule (the job's state, not the request's shape).
    (re.compile(r"job"), re.compile(r"has no schedule")),
    # A queue is the workers' or the job-runners' (jobTemplate), never both: two fields.
    (re.compile(r"queue"), re.compile(r"tickwork job-runner")),
    # What jsonb stores of a jobTemplate, as of a payload, and its size.
    (
        re.compile(r"jobTemplate.*"),
        re.compile(r"numbers must fit in 64 bits|nests deeper than|NUL|surrogates|the limit is"),
    ),
]

# The operations the fast path serves, as schemathesis labels them.
HOT_OPERATIONS = frozenset(
    {f"POST {path}" for path in fast_path.ROUTES}
    | {f"POST {fast_path.RUN_PREFIX}{{runId}}/{action}" for action in fast_path.RUN_ROUTES}
    | {f"POST {fast_path.JOB_PREFIX}{{name}}/{action}" for action in fast_path.JOB_ROUTES}
)


async def seed(api_server: ApiServer) -> dict[str, str]:
    """A job and a leased run of the admin's tenant, so fuzzed calls reach past 404."""
    async with client(api_server, api_server.admin_token) as admin:
        assert (await admin.put("/v1/jobs/fuzz", json={"queue": "default"})).status_code == 201
        for _ in range(3):
            assert (await admin.post("/v1/jobs/fuzz/runs")).status_code == 201
        leased = await admin.post("/v1/lease", json={"queues": ["default"], "max": 2})
        run_id: str = leased.json()["leases"][0]["runId"]
        document = await admin.get("/openapi.json")
        assert document.status_code == 200
    return {"name": "fuzz", "runId": run_id, "document": document.text}


def routed_app(services: Services) -> FastAPI:
    """The app with every call through FastAPI's routing: its fast path has no routes.
    It shares ``services`` with the app already served, whose lifespan starts and stops
    the dispatcher's listeners: this one's does nothing."""
    app = create_app(services)
    assert [m.cls for m in app.user_middleware].count(fast_path.FastPath) == 1
    app.user_middleware = [
        Middleware(fast_path.FastPath, routes={}, run_routes={}, job_routes={})
        if middleware.cls is fast_path.FastPath
        else middleware
        for middleware in app.user_middleware
    ]

    @contextlib.asynccontextmanager
    async def shared(_app: FastAPI) -> AsyncIterator[None]:
        yield

    app.router.lifespan_context = shared
    return app


def _integers(value: Any) -> Any:
    """``value`` with its integral floats written as integers. JSON Schema's ``integer``
    includes 5.0, and schemathesis sends such; the contract reads a number as given
    (docs/http-api.md), so an integer field takes the literal 5, not 5.0 (a ``number``
    field takes both)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {key: _integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integers(item) for item in value]
    return value


def _refused_valid_data(case: schemathesis.Case, response: requests.Response) -> str | None:
    """Why a positive case's answer breaks the contract, or None."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if response.status_code != 400:
        return None
    problem = response.json()
    # invalid-schedule: the cron grammar and the zone database are beyond JSON Schema.
    if problem.get("type") != PROBLEMS + "invalid-request":
        return None
    field, detail = problem.get("field") or "", problem.get("detail", "")
    if any(where.fullmatch(field) and why.search(detail) for where, why in BEYOND_SCHEMA):
        return None
    return f"a request the document allows was refused: {problem}\nbody: {case.body!r}"


class Checker:
    """Calls of one schema against one server, each answer checked; every failure and
    status kept."""

    def __init__(self, schema: schemathesis.BaseSchema, base_url: str, token: str) -> None:
        self.schema = schema
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.session = requests.Session()
        self.failures: dict[str, str] = {}  # by operation and first line, one of each
        self.statuses: Counter[tuple[str, int]] = Counter()

    def send(self, case: schemathesis.Case, checks: list[Any] = CHECKS) -> requests.Response:
        label = case.operation.label
        response = case.call(
            base_url=self.base_url, session=self.session, headers=self.headers, timeout=30
        )
        self.statuses[(label, response.status_code)] += 1
        try:
            case.validate_response(response, checks=checks, headers=self.headers)
        except (AssertionError, BaseExceptionGroup) as error:
            self._fail(label, str(error))
        refused = _refused_valid_data(case, response)
        if refused is not None:
            self._fail(label, refused)
        return response

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = schemathesis.core.NOT_SET,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        checks: list[Any] = CHECKS,
        **path_parameters: str,
    ) -> requests.Response:
        operation = self.schema[path][method]
        return self.send(
            operation.Case(
                path_parameters=path_parameters or None,
                query=query,
                headers=headers,
                body=body,
                media_type="application/json" if body is not schemathesis.core.NOT_SET else None,
            ),
            checks,
        )

    def fuzz(self, known: dict[str, str], keep: Callable[[str], bool]) -> None:
        """Every operation ``keep`` keeps, by generated requests, valid and not."""
        operations = [result.ok() for result in self.schema.get_all_operations()]
        # The job the known name names is deleted last: the others need it.
        operations.sort(key=lambda operation: operation.method.upper() == "DELETE")
        for operation in operations:
            if keep(operation.label):
                self._fuzz(operation, known)

    def _fuzz(self, operation: schemathesis.APIOperation, known: dict[str, str]) -> None:
        names = {p.name for p in operation.path_parameters}
        fixed = {name: value for name, value in known.items() if name in names}
        strategies = [
            operation.as_strategy(generation_mode=mode) for mode in schemathesis.GenerationMode
        ]
        if fixed:
            strategies += [
                operation.as_strategy(generation_mode=mode, path_parameters=fixed)
                for mode in schemathesis.GenerationMode
            ]

        @hypothesis.settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(hypothesis.HealthCheck),
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        )
        @hypothesis.given(case=st.one_of(strategies))
        def check(case: schemathesis.Case) -> None:
            if isinstance(case.body, dict):
                case.body = _integers(case.body)
                # A long-poll would only make the run slower, not find more.
                if isinstance(case.body.get("waitSeconds"), int | float):
                    case.body["waitSeconds"] = 0
            self.send(case)

        check()

    def _fail(self, label: str, message: str) -> None:
        lines = message.strip().splitlines()
        self.failures.setdefault(f"{label}: {lines[0] if lines else ''}", message)

    def two_hundreds(self) -> set[str]:
        return {label for (label, status), _ in self.statuses.items() if 200 <= status < 300}


def walk(api: Checker, job: str, queue: str) -> None:
    """A job's life through every operation, each answer checked against the document
    (the fuzzed calls seldom reach a retry, a dead run or a batch's problems)."""
    spec = {
        "schedule": {"cron": "0 2 * * *", "timeZone": "Europe/Berlin", "jitterSeconds": 0},
        "queue": queue,
        "priority": "critical",
        "retry": {"maxAttempts": 2, "baseSeconds": 0, "maxSeconds": 0},
        "payload": {"format": "csv"},
    }
    name = {"name": job}
    assert api.call("PUT", "/v1/jobs/{name}", body=spec, **name).status_code == 201
    assert api.call("PUT", "/v1/jobs/{name}", body=spec, **name).status_code == 200
    assert api.call("POST", "/v1/jobs/{name}:pause", **name).status_code == 200
    assert api.call("POST", "/v1/jobs/{name}:resume", **name).status_code == 200

    key = {"Idempotency-Key": f"{job}-1"}
    one = {"payload": {"n": 1}, "priority": "bulk"}
    first = api.call("POST", "/v1/jobs/{name}/runs", body=one, headers=key, **name)
    assert first.status_code == 201
    again = api.call("POST", "/v1/jobs/{name}/runs", body=one, headers=key, **name)
    assert again.status_code == 200
    later = api.call("POST", "/v1/jobs/{name}/runs", body={"delaySeconds": 3600}, **name)
    assert later.status_code == 201

    # A plain batch is rendered as spliced JSON text (render.ready_runs): each of its runs
    # must read as the same run rendered field by field (render.run).
    plain = {"runs": [{}, {"payload": {"n": 2}}, {"payload": None}]}
    batch = api.call("POST", "/v1/jobs/{name}/runs:batch", body=plain, **name)
    assert batch.status_code == 200
    run_fields = wire_fields(models.Run)
    for item in batch.json()["items"]:
        assert set(item) == run_fields
        alone = api.call("GET", "/v1/runs/{runId}", runId=item["runId"]).json()
        assert {key: alone[key] for key in run_fields} == item
    mixed = {
        "runs": [
            {"idempotencyKey": f"{job}-b1", "payload": 3},
            {"runAt": "2030-01-01T00:00:00Z", "delaySeconds": 1},
        ]
    }
    items = api.call("POST", "/v1/jobs/{name}/runs:batch", body=mixed, **name).json()["items"]
    assert "problem" in items[1], items

    leased = api.call(
        "POST", "/v1/lease", body={"queues": [queue], "max": 10, "workerId": f"{job}-worker"}
    )
    leases = leased.json()["leases"]
    assert len(leases) == 5, leases
    (a, b, c, d, e) = ({"runId": x["runId"], "fencingToken": x["fencingToken"]} for x in leases)

    def beat(lease: dict[str, Any], **body: Any) -> requests.Response:
        token = {"fencingToken": lease["fencingToken"], **body}
        return api.call("POST", "/v1/runs/{runId}/heartbeat", body=token, runId=lease["runId"])

    def complete(lease: dict[str, Any], **body: Any) -> requests.Response:
        token = {"fencingToken": lease["fencingToken"], **body}
        return api.call("POST", "/v1/runs/{runId}/complete", body=token, runId=lease["runId"])

    assert beat(a, extendSeconds=60).status_code == 200
    stale = {**b, "fencingToken": b["fencingToken"] + 1000}
    beats = api.call("POST", "/v1/runs:heartbeat", body={"items": [a, stale]}).json()["items"]
    assert "problem" in beats[1], beats
    assert complete(a, outcome="succeeded").json() == {"state": "succeeded"}
    retry = complete(b, outcome="failed", error={"message": "boom", "code": 7}).json()
    assert retry["state"] == "retry_wait" and "nextAttemptAt" in retry, retry
    fatal = {"outcome": "failed", "error": {"message": "bad input", "retryable": False}}
    gone = {"runId": "r0-999999999", "fencingToken": 1, "outcome": "succeeded"}
    completions = [{**c, **fatal}, {**d, **fatal}, {**a, "outcome": "succeeded"}, gone]
    done = api.call("POST", "/v1/runs:complete", body={"items": completions}).json()["items"]
    assert [item.get("state") for item in done] == ["dead", "dead", "succeeded", None], done

    # Attempts finished (c) and in flight (e); a job with a last run; pages; the DLQ.
    assert api.call("GET", "/v1/runs/{runId}", runId=c["runId"]).status_code == 200
    assert api.call("GET", "/v1/runs/{runId}", runId=e["runId"]).status_code == 200
    assert api.call("GET", "/v1/jobs/{name}", **name).json()["lastRun"] is not None
    assert api.call("GET", "/v1/jobs", query={"limit": 1}).status_code == 200
    assert api.call("GET", "/v1/jobs/{name}/runs", **name).status_code == 200
    dead = api.call("GET", "/v1/dlq", query={"job": job}).json()["items"]
    assert {x["runId"] for x in dead} == {c["runId"], d["runId"]}
    assert api.call("POST", "/v1/dlq/{runId}:replay", runId=c["runId"]).status_code == 200
    assert api.call("POST", "/v1/dlq/{runId}:discard", runId=d["runId"]).status_code == 200
    cancelled = api.call("POST", "/v1/runs/{runId}:cancel", runId=later.json()["runId"])
    assert cancelled.status_code == 200
    assert api.call("GET", "/v1/audit", query={"job": job}).status_code == 200
    # A backfill's preview, a bulk operation's life, a queue paused and resumed.
    span = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z", "dryRun": True}
    backfill = api.call("POST", "/v1/jobs/{name}:backfill", body=span, **name)
    assert len(backfill.json()["fireTimes"]) == 2, backfill.text
    bulk = {"action": "replay", "filter": {"job": job}}
    operation = api.call("POST", "/v1/operations", body=bulk)
    assert operation.status_code == 202, operation.text
    made = {"operationId": operation.json()["id"]}
    assert api.call("GET", "/v1/operations/{operationId}", **made).status_code == 200
    assert api.call("POST", "/v1/operations/{operationId}:cancel", **made).status_code == 200
    for verb in ("pause", "resume"):
        assert api.call("POST", f"/v1/queues/{{queue}}:{verb}", queue=queue).status_code == 200
    hook = {"name": f"{job}-hook"}
    target = {"url": "https://hooks.example.com/tickwork", "secretRef": {"env": "HOOK_KEY"}}
    put = api.call("PUT", "/v1/notification-targets/{name}", body=target, **hook)
    assert put.status_code == 201, put.text
    again = api.call("PUT", "/v1/notification-targets/{name}", body=target, **hook)
    assert again.status_code == 200
    assert api.call("GET", "/v1/notification-targets/{name}", **hook).status_code == 200
    assert api.call("GET", "/v1/notification-targets").status_code == 200
    assert api.call("DELETE", "/v1/notification-targets/{name}", **hook).status_code == 204
    assert api.call("DELETE", "/v1/jobs/{name}", **name).status_code == 200
    for path in ("/healthz", "/readyz", "/metrics"):
        assert api.call("GET", path).status_code == 200


def check_contract(
    fast_url: str, routed_url: str, token: str, document: dict[str, Any], known: dict[str, str]
) -> tuple[Checker, Checker]:
    """The walk and the fuzz on the app as served (every operation) and on the routed
    one (the hot operations: the others take the same way in both)."""
    schema = schemathesis.openapi.from_dict(document)
    # Every call carries the admin token; tests of missing tokens live in test_auth. No
    # NUL in strings: PostgreSQL's text cannot hold one, and the contract refuses it.
    schema.config.generation.update(with_security_parameters=False, allow_x00=False)
    fast, routed = Checker(schema, fast_url, token), Checker(schema, routed_url, token)
    walk(fast, "contract-fast", "contract-fast")
    walk(routed, "contract-routed", "contract-routed")
    fast.fuzz(known, lambda _label: True)
    routed.fuzz(known, HOT_OPERATIONS.__contains__)
    return fast, routed


@pytest.mark.timeout(180)
async def test_generated_requests_keep_the_contract_on_both_paths(
    api_server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = await seed(api_server)
    document = json.loads(known.pop("document"))
    operations = {
        f"{method.upper()} {path}"
        for path, methods in document["paths"].items()
        for method in methods
    }
    assert len(operations) == 36  # every route of the contract, ops included
    assert operations >= HOT_OPERATIONS and len(HOT_OPERATIONS) == 7
    server = HttpServer(routed_app(api_server.services), port=0)
    routed_url = await server.start()
    try:
        fast, routed = await asyncio.to_thread(
            check_contract, api_server.url, routed_url, api_server.admin_token, document, known
        )
    finally:
        await server.stop()
    routed.session.close()

    shards_down: tuple[int, ...] = (2,)

    async def down(_engine: Installation, _within: float) -> readiness.Readiness:
        problems = tuple(f"shard {n}: unreachable" for n in shards_down)
        return readiness.Readiness(shards=4, problems=problems, down=shards_down)

    monkeypatch.setattr(Installation, "readiness", down)
    with fast.session:
        # A shard down: still ready, degraded; every shard down: a documented 503. Both
        # answers are checked against the document, not refused.
        degraded = await asyncio.to_thread(
            functools.partial(fast.call, "GET", "/readyz", checks=CONFORMANCE)
        )
        shards_down = (0, 1, 2, 3)
        not_ready = await asyncio.to_thread(
            functools.partial(fast.call, "GET", "/readyz", checks=CONFORMANCE)
        )
    assert (degraded.status_code, not_ready.status_code) == (200, 503)
    failures = {**fast.failures, **{f"routed {k}": v for k, v in routed.failures.items()}}
    assert not failures, "\n\n".join(failures.values())
    # Every answer shape was checked: each operation answered 2xx at least once.
    assert fast.two_hundreds() == operations
    assert routed.two_hundreds() >= HOT_OPERATIONS
    statuses: Counter[int] = Counter()
    for (_, status), n in fast.statuses.items():
        statuses[status] += n
    # Generated requests got past authentication and validation, not only refusals.
    assert sum(n for status, n in statuses.items() if 200 <= status < 300) > 40, statuses
    assert statuses[400] > 0 and statuses[404] > 0, statuses


async def test_the_openapi_document_resolves_every_reference(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        document = (await team.get("/openapi.json")).json()
    text = json.dumps(document)
    prefix = "#/components/schemas/"
    referenced = {ref.removeprefix(prefix) for ref in re.findall(r'"\$ref": "([^"]+)"', text)}
    assert referenced <= set(document["components"]["schemas"])
    assert "$defs" not in text
    # Every route but the open ones declares the bearer scheme.
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            expected = None if path in ("/healthz", "/readyz") else [{"HTTPBearer": []}]
            assert operation.get("security") == expected, (method, path)


async def test_every_error_is_documented_as_problem_json(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        document = (await team.get("/openapi.json")).json()
    problem = {"$ref": "#/components/schemas/Problem"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            answers = operation["responses"]
            where = f"{method.upper()} {path}"
            # The server refuses invalid input with 400, never FastAPI's 422 shape (a
            # route's own 422, idempotency-key-reused, is a problem like any other).
            assert answers.get("422", {}).get("description") != "Validation Error", where
            for status, answer in answers.items():
                # /readyz's 503 is a status document, as its 200 (docs/http-api.md).
                if int(status) >= 400 and (path, status) != ("/readyz", "503"):
                    assert answer["content"] == {"application/problem+json": {"schema": problem}}, (
                        where,
                        status,
                    )
            if operation.get("security"):
                assert "401" in answers, where
    assert "HTTPValidationError" not in document["components"]["schemas"]
    exposition = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(exposition) == [metrics.CONTENT_TYPE]  # Prometheus text, not JSON
