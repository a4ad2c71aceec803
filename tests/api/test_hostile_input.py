"""Arbitrary JSON, strings and headers at every route, with valid tokens so that the
input reaches validation, and at every manifest field.

Whatever arrives: no 5xx; every refusal is a problem document with its type (and the
field, for the 4xx that are about input); a refused request stores nothing (rows of
every table, runs' states and leases, definitions' generations); the process still
answers ``/healthz`` afterwards.

The server runs on the test's event loop; hypothesis drives a blocking client in a
worker thread and reads the database back through the loop.
"""

from __future__ import annotations

import asyncio
import json
import math
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from conftest import ApiServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.clients import PROBLEMS
from tickwork.core import limits
from tickwork.engine import manifests

# Statuses whose problems are about the input, and so must name the field.
ABOUT_INPUT = {400, 413, 422}
EXAMPLES = 25

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

# --- strategies ---

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["", "0", "1", "yes", "2030-01-01T00:00:00Z", "0 2 * * *", "Europe"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def nest(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"x": value}
    return value


deep_values = st.integers(limits.MAX_JSON_DEPTH - 2, 300).map(nest)
values = st.one_of(json_values, json_values, deep_values)
texts = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["target", "r0-1", "r1-2", "abc\n", "default", "a" * 300, "%", "..", ""]),
)
visible = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
header_values = st.one_of(visible, st.text(string.printable.strip(), max_size=300))


def shaped(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of ``fields`` (each arbitrary) and now and then a stranger."""
    keyed = st.fixed_dictionaries({}, optional=fields)
    extra = st.dictionaries(st.text(max_size=12), values, max_size=2)
    return st.builds(lambda a, b: a | b, keyed, st.one_of(st.just({}), extra))


SPEC_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "schedule": st.one_of(
        values,
        shaped(
            {
                "cron": st.one_of(values, texts),
                "timeZone": st.one_of(values, texts),
                "jitterSeconds": values,
                "missedRunPolicy": values,
                "startingDeadlineSeconds": values,
            }
        ),
    ),
    "runAt": st.one_of(values, texts),
    "queue": st.one_of(values, texts),
    "priority": values,
    "timeoutSeconds": values,
    "retry": st.one_of(
        values, shaped({"maxAttempts": values, "baseSeconds": values, "maxSeconds": values})
    ),
    "concurrency": values,
    "paused": values,
    "payload": values,
}
specs = st.one_of(shaped(SPEC_FIELDS), values)
enqueues = st.one_of(
    shaped(
        {
            "runAt": st.one_of(values, texts),
            "delaySeconds": values,
            "payload": values,
            "priority": values,
            "ifNotRunning": values,
        }
    ),
    values,
)
batch_items = shaped(
    {"runAt": values, "delaySeconds": values, "payload": values, "idempotencyKey": values}
)
batches = st.one_of(
    st.builds(lambda runs: {"runs": runs}, st.lists(st.one_of(batch_items, values), max_size=5)),
    values,
)
bodies = st.one_of(
    st.binary(max_size=40), st.sampled_from([b"", b"{", b"[]", b"null", b"\xff\xfe", b'"x"'])
)
extra_headers = st.dictionaries(
    st.sampled_from(
        ["Idempotency-Key", "Content-Type", "Accept", "X-Anything", "Content-Encoding"]
    ),
    header_values,
    max_size=3,
)
queries = st.one_of(
    st.dictionaries(
        st.sampled_from(["cursor", "limit", "state", "job", "other"]), texts, max_size=3
    ),
    st.dictionaries(st.sampled_from(["tenant", "limit"]), texts, max_size=2),  # 403 mostly
    st.just({}),
)


def completion(token: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return shaped(
        {
            "fencingToken": st.one_of(values, token),
            "outcome": st.one_of(values, st.sampled_from(["succeeded", "failed"])),
            "error": st.one_of(values, shaped({"message": values, "retryable": values})),
        }
    )


# --- what is stored, and what a response must look like ---

# One round trip per shard: a digest of every definition and run as stored, and the
# number of attempts and audit entries.
SNAPSHOT = """
SELECT (SELECT md5(coalesce(string_agg(d::text, '|' ORDER BY d.tenant, d.name), ''))
        FROM definitions d),
       (SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r.id), '')) FROM runs r),
       (SELECT count(*) FROM run_attempts),
       (SELECT count(*) FROM audit_log)
"""


async def snapshot(api_server: ApiServer) -> list[Any]:
    async def one(shard: int) -> tuple[Any, ...]:
        async with api_server.database.connection(shard) as conn:
            return tuple(await conn.fetchrow(SNAPSHOT))

    shards = range(api_server.database.shard_count)
    return list(await asyncio.gather(*(one(shard) for shard in shards)))


def check_answer(response: httpx.Response) -> None:
    request = f"{response.request.method} {response.request.url}"
    assert response.status_code < 500, f"{request} -> {response.status_code} {response.text}"
    if response.status_code < 400:
        return
    assert response.headers["content-type"] == "application/problem+json", request
    problem = response.json()
    assert problem["type"].startswith(PROBLEMS), problem
    assert problem["status"] == response.status_code, problem
    assert isinstance(problem["title"], str) and problem["title"], problem
    assert isinstance(problem["detail"], str) and problem["detail"], problem
    if response.status_code in ABOUT_INPUT:
        assert isinstance(problem.get("field"), str) and problem["field"], (request, problem)


def check_items(response: httpx.Response) -> None:
    """A batch answer: each refused item is a problem of its own."""
    json_answer = response.headers.get("content-type", "").startswith("application/json")
    document = response.json() if response.status_code == 200 and json_answer else None
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        return
    for item in document["items"]:
        if "problem" in item:
            problem = item["problem"]
            assert problem["type"].startswith(PROBLEMS) and problem["status"] >= 400, item
            if problem["status"] in ABOUT_INPUT:
                assert problem.get("field"), item


Call = Callable[[httpx.Client, Any], httpx.Response]


def fuzz(
    api_server: ApiServer,
    loop: asyncio.AbstractEventLoop,
    token: str,
    operations: dict[str, tuple[st.SearchStrategy[Any], Call]],
    examples: int = EXAMPLES,
) -> dict[str, dict[int, int]]:
    """Every operation against its strategy; the statuses seen, per operation."""
    seen: dict[str, dict[int, int]] = {}

    def stored() -> list[Any]:
        return asyncio.run_coroutine_threadsafe(snapshot(api_server), loop).result(30)

    with httpx.Client(
        base_url=api_server.url, headers=api_server.headers(token), timeout=30
    ) as session:
        for label, (strategy, call) in operations.items():
            statuses = seen.setdefault(label, {})
            checker(label, strategy, call, session, stored, statuses, examples)()
        assert session.get("/healthz").status_code == 200
    return seen


def checker(
    label: str,
    strategy: st.SearchStrategy[Any],
    call: Call,
    session: httpx.Client,
    stored: Callable[[], list[Any]],
    statuses: dict[int, int],
    examples: int,
) -> Callable[[], None]:
    # What is stored, as of the last call: only an accepted call may change it.
    last = [stored()]

    @settings(FUZZ, max_examples=examples)
    @given(case=strategy)
    def check(case: Any) -> None:
        response = call(session, case)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        check_answer(response)
        check_items(response)
        now = stored()
        if response.status_code >= 400:
            assert now == last[0], f"{label} stored something and answered {response}"
        last[0] = now

    return check  # type: ignore[no-any-return]


def path(text: str) -> str:
    return quote(text, safe="")


def send(
    method: str, url: Callable[[Any], str]
) -> Callable[[httpx.Client, tuple[Any, Any, dict[str, str], dict[str, str]]], httpx.Response]:
    """A call with a JSON (or raw) body, query parameters and extra headers."""

    def call(
        session: httpx.Client, case: tuple[Any, Any, dict[str, str], dict[str, str]]
    ) -> httpx.Response:
        where, body, params, headers = case
        if isinstance(body, bytes):
            return session.request(method, url(where), content=body, params=params, headers=headers)
        # NaN and infinities included, as Python's encoder writes them.
        content = json.dumps(_no_wait(body)).encode()
        headers = {"content-type": "application/json", **headers}
        return session.request(method, url(where), content=content, params=params, headers=headers)

    return call


def _no_wait(body: Any) -> Any:
    # A long-poll would only make the run slower, not find more.
    if isinstance(body, dict) and isinstance(body.get("waitSeconds"), int | float):
        wait = body["waitSeconds"]
        if not isinstance(wait, bool) and math.isfinite(wait) and wait > 0:
            body = body | {"waitSeconds": 0}
    return body


def cases(
    where: st.SearchStrategy[Any], body: st.SearchStrategy[Any], headers: bool = True
) -> st.SearchStrategy[tuple[Any, Any, dict[str, str], dict[str, str]]]:
    return st.tuples(
        where,
        st.one_of(body, body, bodies),
        queries,
        extra_headers if headers else st.just({}),
    )


async def seed(api_server: ApiServer) -> dict[str, Any]:
    """A job with ready, leased and dead runs, so fuzzed calls reach past 404."""
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as team:
        assert (await team.put("/v1/jobs/target", json={"queue": "default"})).status_code == 201
        runs = [(await team.post("/v1/jobs/target/runs")).json()["runId"] for _ in range(4)]
    headers = api_server.headers(api_server.worker_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as worker:
        leased = (await worker.post("/v1/lease", json={"queues": ["default"], "max": 2})).json()
        [dead, held] = leased["leases"]
        failed = {"fencingToken": dead["fencingToken"], "outcome": "failed"}
        failed["error"] = {"message": "boom", "retryable": False}
        assert (await worker.post(f"/v1/runs/{dead['runId']}/complete", json=failed)).json() == {
            "state": "dead"
        }
    return {
        "runs": runs,
        "dead": dead["runId"],
        "held": held["runId"],
        "token": held["fencingToken"],
    }


@pytest.mark.timeout(180)
async def test_team_routes_refuse_whatever_they_are_sent(api_server: ApiServer) -> None:
    known = await seed(api_server)
    names = st.one_of(st.just("target"), st.just("target"), st.just("target"), texts)
    run_ids = st.one_of(texts, st.sampled_from([known["held"], known["dead"], *known["runs"]]))
    nothing = st.just(None)
    operations: dict[str, tuple[st.SearchStrategy[Any], Call]] = {
        "put job": (cases(names, specs), send("PUT", lambda n: f"/v1/jobs/{path(n)}")),
        "get job": (cases(names, nothing), send("GET", lambda n: f"/v1/jobs/{path(n)}")),
        "delete job": (
            cases(texts.filter(lambda name: name != "target"), nothing),
            send("DELETE", lambda n: f"/v1/jobs/{path(n)}"),
        ),
        "list jobs": (cases(st.just(""), nothing), send("GET", lambda _: "/v1/jobs")),
        "pause": (cases(names, values), send("POST", lambda n: f"/v1/jobs/{path(n)}:pause")),
        "resume": (cases(names, values), send("POST", lambda n: f"/v1/jobs/{path(n)}:resume")),
        "enqueue": (cases(names, enqueues), send("POST", lambda n: f"/v1/jobs/{path(n)}/runs")),
        "enqueue batch": (
            cases(names, batches),
            send("POST", lambda n: f"/v1/jobs/{path(n)}/runs:batch"),
        ),
        "list runs": (cases(names, nothing), send("GET", lambda n: f"/v1/jobs/{path(n)}/runs")),
        "get run": (cases(run_ids, nothing), send("GET", lambda r: f"/v1/runs/{path(r)}")),
        "cancel": (
            cases(run_ids, values),
            send("POST", lambda r: f"/v1/runs/{path(r)}:cancel"),
        ),
        "dlq": (cases(st.just(""), nothing), send("GET", lambda _: "/v1/dlq")),
        "audit": (cases(st.just(""), nothing), send("GET", lambda _: "/v1/audit")),
        "replay": (cases(run_ids, values), send("POST", lambda r: f"/v1/dlq/{path(r)}:replay")),
        "discard": (cases(run_ids, values), send("POST", lambda r: f"/v1/dlq/{path(r)}:discard")),
    }
    loop = asyncio.get_running_loop()
    seen = await asyncio.to_thread(fuzz, api_server, loop, api_server.team_token, operations)
    # The inputs got past authentication to validation, and some were accepted.
    assert sum(n for statuses in seen.values() for s, n in statuses.items() if s < 300) > 20, seen
    assert all(any(s >= 400 for s in statuses) for statuses in seen.values()), seen


@pytest.mark.timeout(180)
async def test_worker_routes_refuse_whatever_they_are_sent(api_server: ApiServer) -> None:
    known = await seed(api_server)
    held, token = known["held"], known["token"]
    run_ids = st.one_of(texts, st.just(held), st.just(known["dead"]))
    tokens = st.one_of(st.just(token), st.integers())
    beat = shaped({"fencingToken": st.one_of(values, tokens), "extendSeconds": values})
    lease = shaped(
        {
            "queues": st.one_of(values, st.lists(texts, max_size=3)),
            "max": values,
            "waitSeconds": values,
            "leaseSeconds": values,
            "workerId": st.one_of(values, texts),
        }
    )

    def items(item: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        with_id = st.builds(lambda i, r: i | {"runId": r}, item, st.one_of(run_ids, values))
        return st.one_of(
            st.builds(lambda xs: {"items": xs}, st.lists(st.one_of(with_id, values), max_size=4)),
            values,
        )

    operations: dict[str, tuple[st.SearchStrategy[Any], Call]] = {
        "lease": (
            cases(st.just(""), st.one_of(lease, values)),
            send("POST", lambda _: "/v1/lease"),
        ),
        "heartbeat": (
            cases(run_ids, st.one_of(beat, values)),
            send("POST", lambda r: f"/v1/runs/{path(r)}/heartbeat"),
        ),
        "complete": (
            cases(run_ids, st.one_of(completion(tokens), values)),
            send("POST", lambda r: f"/v1/runs/{path(r)}/complete"),
        ),
        "heartbeat batch": (
            cases(st.just(""), items(beat)),
            send("POST", lambda _: "/v1/runs:heartbeat"),
        ),
        "complete batch": (
            cases(st.just(""), items(completion(tokens))),
            send("POST", lambda _: "/v1/runs:complete"),
        ),
        "get run": (cases(run_ids, st.just(None)), send("GET", lambda r: f"/v1/runs/{path(r)}")),
    }
    loop = asyncio.get_running_loop()
    seen = await asyncio.to_thread(fuzz, api_server, loop, api_server.worker_token, operations)
    assert all(any(s >= 400 for s in statuses) for statuses in seen.values()), seen
    assert any(s == 200 for statuses in seen.values() for s in statuses), seen


@pytest.mark.timeout(180)
async def test_ops_routes_and_headers(api_server: ApiServer) -> None:
    operations: dict[str, tuple[st.SearchStrategy[Any], Call]] = {
        name: (cases(st.just(""), st.just(None)), send("GET", lambda _, url=url: url))
        for name, url in [
            ("healthz", "/healthz"),
            ("readyz", "/readyz"),
            ("metrics", "/metrics"),
            ("openapi", "/openapi.json"),
        ]
    }
    loop = asyncio.get_running_loop()
    seen = await asyncio.to_thread(fuzz, api_server, loop, api_server.admin_token, operations, 10)
    assert all(set(statuses) == {200} for statuses in seen.values()), seen


# --- every manifest field ---

MANIFEST_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    **SPEC_FIELDS,
    "metadata.name": st.one_of(values, texts),
    "metadata.namespace": st.one_of(values, texts),
    "apiVersion": st.one_of(values, texts),
    "spec": values,
    "metadata": values,
}


def manifest_with(field: str, value: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "apiVersion": "tickwork.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "probe", "namespace": "acme"},
        "spec": {},
    }
    if field.startswith("metadata."):
        document["metadata"][field.removeprefix("metadata.")] = value
    elif field in ("apiVersion", "spec", "metadata"):
        document[field] = value
    else:
        document["spec"][field] = value
    return document


@pytest.mark.parametrize("field", sorted(MANIFEST_FIELDS))
def test_every_manifest_field_is_refused_by_name_or_loads(field: str, tmp_path: Path) -> None:
    file = tmp_path / "probe.yaml"

    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(value=MANIFEST_FIELDS[field])
    def check(value: Any) -> None:
        try:
            text = yaml.safe_dump(manifest_with(field, value), allow_unicode=True)
        except yaml.YAMLError:
            return  # not something a YAML file can hold
        file.write_text(text, "utf-8")
        try:
            loaded = manifests.load_file(file)
        except manifests.ManifestError as error:
            message = str(error)
            where = (
                field if field in ("apiVersion", "metadata") or "." in field else f"spec.{field}"
            )
            if field == "spec":
                where = "spec"
            assert where in message, message
            assert len(message) < 1000, message
            return
        assert len(loaded) <= 1

    check()


def test_any_text_in_a_manifest_file_is_refused_or_loads(tmp_path: Path) -> None:
    file = tmp_path / "any.yaml"
    head = b"kind: ScheduledJob\napiVersion: tickwork.dev/v1alpha1\n"

    @settings(max_examples=150, deadline=None, derandomize=True, database=None)
    @given(raw=st.one_of(st.text(max_size=200).map(str.encode), st.binary(max_size=200)))
    def check(raw: bytes) -> None:
        file.write_bytes(head + raw)
        try:
            manifests.load_file(file)
        except manifests.ManifestError as error:
            assert str(error).startswith(str(file))

    check()
