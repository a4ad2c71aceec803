"""Schemathesis over /openapi.json: no generated request, valid or not, gets a 5xx.

The server runs in the test's event loop, so the (blocking) schemathesis calls run in a
worker thread while the loop keeps serving them.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from collections import Counter
from typing import Any

import httpx
import hypothesis
import pytest
import requests
import schemathesis
from conftest import ApiServer
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from tickwork.engine import metrics

EXAMPLES_PER_OPERATION = 25
TLS = ssl.create_default_context()


async def seed(api_server: ApiServer) -> dict[str, str]:
    """A job and a leased run of the admin's tenant, so fuzzed calls reach past 404."""
    headers = api_server.headers(api_server.admin_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers, verify=TLS) as admin:
        assert (await admin.put("/v1/jobs/fuzz", json={"queue": "default"})).status_code == 201
        for _ in range(3):
            assert (await admin.post("/v1/jobs/fuzz/runs")).status_code == 201
        leased = await admin.post("/v1/lease", json={"queues": ["default"], "max": 2})
        run_id: str = leased.json()["leases"][0]["runId"]
        document = await admin.get("/openapi.json")
        assert document.status_code == 200
    return {"name": "fuzz", "runId": run_id, "document": document.text}


def fuzz(
    base_url: str, token: str, document: dict[str, Any], known: dict[str, str]
) -> tuple[list[str], Counter[int]]:
    """Run every operation; return a description of each 5xx found, and every status."""
    schema = schemathesis.openapi.from_dict(document)
    # Every call carries the admin token; tests of missing tokens live in test_auth.
    schema.config.generation.update(with_security_parameters=False)
    with requests.Session() as session:
        return _fuzz_operations(schema, session, base_url, token, known)


def _fuzz_operations(
    schema: schemathesis.BaseSchema,
    session: requests.Session,
    base_url: str,
    token: str,
    known: dict[str, str],
) -> tuple[list[str], Counter[int]]:
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    statuses: Counter[int] = Counter()

    for result in schema.get_all_operations():
        operation = result.ok()
        names = {p.name for p in operation.path_parameters}
        fixed = {name: value for name, value in known.items() if name in names}
        strategies = [
            operation.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE),
            operation.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE),
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
            body = case.body
            # A long-poll would only make the run slower, not find more.
            if isinstance(body, dict) and isinstance(body.get("waitSeconds"), int | float):
                body["waitSeconds"] = 0
            response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
            statuses[response.status_code] += 1
            case.validate_response(response, checks=[not_a_server_error], headers=headers)

        try:
            check()
        except Exception as error:
            failures.append(f"{operation.label}: {error}")
    return failures, statuses


@pytest.mark.timeout(120)
async def test_no_generated_request_gets_a_server_error(api_server: ApiServer) -> None:
    known = await seed(api_server)
    document = json.loads(known.pop("document"))
    operations = sum(len(methods) for methods in document["paths"].values())
    assert operations == 23  # every route of the contract, ops included
    failures, statuses = await asyncio.to_thread(
        fuzz, api_server.url, api_server.admin_token, document, known
    )
    assert not failures, "\n\n".join(failures)
    # Generated requests got past authentication and validation, not only refusals.
    assert sum(n for status, n in statuses.items() if 200 <= status < 300) > 40, statuses
    assert statuses[400] > 0 and statuses[404] > 0, statuses


async def test_the_openapi_document_resolves_every_reference(api_server: ApiServer) -> None:
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers, verify=TLS) as team:
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
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers, verify=TLS) as team:
        document = (await team.get("/openapi.json")).json()
    problem = {"$ref": "#/components/schemas/Problem"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            answers = operation["responses"]
            where = f"{method.upper()} {path}"
            # The server refuses invalid input with 400, never FastAPI's 422 shape.
            assert "422" not in answers, where
            for status, answer in answers.items():
                if int(status) >= 400:
                    assert answer["content"] == {"application/problem+json": {"schema": problem}}, (
                        where,
                        status,
                    )
            if operation.get("security"):
                assert "401" in answers, where
    assert "HTTPValidationError" not in document["components"]["schemas"]
    exposition = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(exposition) == [metrics.CONTENT_TYPE]  # Prometheus text, not JSON
