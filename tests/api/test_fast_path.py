"""The hot calls (the workers' lease, heartbeat and complete, batched or of one run; the
enqueue of one run or a batch) skip FastAPI's routing: they must answer exactly what the
routed calls answer, errors included, and still pass through authentication, the body limit
and the error handlers."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest
from conftest import ApiServer

from api.clients import PROBLEMS
from tickwork.api import fast_path
from tickwork.engine.dispatch import Dispatcher

# Every hot call with bodies of each shape a client may send: good, bad, hostile.
CALLS: list[tuple[str, bytes]] = [
    ("/v1/lease", b'{"queues": ["default"], "max": 5}'),
    ("/v1/lease", b'{"queues": ["default"], "max": 0}'),
    ("/v1/lease", b'{"queues": ["default"], "colour": "red"}'),
    ("/v1/lease", b'{"queues": ["nope"]}'),
    ("/v1/lease", b"{"),
    ("/v1/lease", b"[]"),
    ("/v1/lease", b'{"queues": ["default"], "workerId": "a\\u0000b"}'),
    ("/v1/lease", b'{"queues": ["default"], "max": 99999999999999999999999}'),
    ("/v1/runs:heartbeat", b'{"items": [{"runId": "r0-1", "fencingToken": 1}]}'),
    ("/v1/runs:heartbeat", b'{"items": [{"runId": "bogus", "fencingToken": 1}]}'),
    ("/v1/runs:heartbeat", b'{"items": []}'),
    ("/v1/runs:complete", b'{"items": [{"runId": "r0-1", "fencingToken": 1, "outcome": "x"}]}'),
    ("/v1/runs:complete", b'{"items": [{"runId": "r0-1", "fencingToken": 1}]}'),
    ("/v1/runs:complete", b'{"items": "all"}'),
    ("/v1/runs:complete", b'{"items": [' + b"[" * 200 + b"]" * 200 + b"]}"),
    ("/v1/runs/r0-1/heartbeat", b'{"fencingToken": 1}'),
    ("/v1/runs/r0-1/heartbeat", b'{"fencingToken": "one"}'),
    ("/v1/runs/bogus/heartbeat", b'{"fencingToken": 1}'),
    ("/v1/runs/r0-1/complete", b'{"fencingToken": 1, "outcome": "succeeded"}'),
    ("/v1/runs/r0-1/complete", b'{"fencingToken": 1, "outcome": "failed", "error": 3}'),
    ("/v1/runs/r0-1/complete", b'{"fencingToken": 1, "outcome": "snoozed", "delaySeconds": 5}'),
    ("/v1/runs/r0-1/complete", b'{"fencingToken": 1, "outcome": "snoozed"}'),
    ("/v1/runs/r0-1/complete", b'{"fencingToken": 1, "outcome": "snoozed", "delaySeconds": -1}'),
    ("/v1/runs/r0-1/complete", b'{"fencingToken": 1, "outcome": "failed", "delaySeconds": 5}'),
    ("/v1/runs/r0-1/complete", b"null"),
    ("/v1/runs/r9999-1/complete", b'{"fencingToken": 1, "outcome": "succeeded"}'),
    ("/v1/runs/r0%2F1/complete", b'{"fencingToken": 1, "outcome": "succeeded"}'),
    ("/v1/runs/r0-1/complete/again", b'{"fencingToken": 1, "outcome": "succeeded"}'),
    ("/v1/runs//complete", b'{"fencingToken": 1, "outcome": "succeeded"}'),
]


def _answer(response: httpx.Response) -> tuple[int, str, Any]:
    body = response.json()
    if isinstance(body, dict):
        body.pop("instance", None)
    return response.status_code, response.headers["content-type"], body


async def _answers(api_server: ApiServer, token: str) -> list[tuple[int, str, Any]]:
    headers = {**api_server.headers(token), "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as http:
        return [_answer(await http.post(path, content=body)) for path, body in CALLS]


def _route_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call through FastAPI's routing, as without the fast path."""
    for routes in (fast_path.ROUTES, fast_path.RUN_ROUTES, fast_path.JOB_ROUTES):
        for key in list(routes):
            monkeypatch.delitem(routes, key)


@pytest.mark.parametrize("token", ["worker_token", "team_token"])
async def test_hot_calls_answer_as_the_routed_calls_do(
    api_server: ApiServer, monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    fast = await _answers(api_server, getattr(api_server, token))
    _route_everything(monkeypatch)
    routed = await _answers(api_server, getattr(api_server, token))
    assert fast == routed
    # The bodies above reach the routes' own checks, not only the shared ones.
    statuses = {status for status, _, _ in fast}
    assert {200, 400, 404} <= statuses if token == "worker_token" else 403 in statuses


async def test_hot_calls_are_authenticated_and_bounded(api_server: ApiServer) -> None:
    async with httpx.AsyncClient(base_url=api_server.url) as http:
        anonymous = await http.post("/v1/lease", json={"queues": ["default"]})
        assert anonymous.status_code == 401
        assert anonymous.json()["type"] == PROBLEMS + "unauthenticated"
        huge = b'{"queues": ["default"], "workerId": "' + b"x" * (5 << 20) + b'"}'
        too_large = await http.post(
            "/v1/lease",
            content=huge,
            headers={
                **api_server.headers(api_server.worker_token),
                "content-type": "application/json",
            },
        )
        assert too_large.status_code == 413
        assert too_large.json()["type"] == PROBLEMS + "payload-too-large"
        # Another method on a hot path is FastAPI's to answer, as before.
        wrong_method = await http.get(
            "/v1/lease", headers=api_server.headers(api_server.worker_token)
        )
        assert wrong_method.status_code == 405


async def test_a_store_outage_is_503_and_a_bug_is_500_on_the_hot_calls(
    api_server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused(*_args: object, **_kwargs: object) -> list[object]:
        raise ConnectionRefusedError("connection refused")

    monkeypatch.setattr(Dispatcher, "lease", refused)
    async with httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(api_server.worker_token)
    ) as http:
        down = await http.post("/v1/lease", json={"queues": ["default"]})
        assert down.status_code == 503
        assert down.json()["type"] == PROBLEMS + "store-unavailable"
        assert down.headers["retry-after"] == "1"

        async def broken(*_args: object, **_kwargs: object) -> list[object]:
            raise ZeroDivisionError("a bug")

        monkeypatch.setattr(Dispatcher, "lease", broken)
        bug = await http.post("/v1/lease", json={"queues": ["default"]})
        assert bug.status_code == 500
        assert bug.json()["type"] == PROBLEMS + "internal"
        # The server goes on serving.
        monkeypatch.undo()
        assert (await http.post("/v1/lease", json={"queues": ["default"]})).status_code == 200


DEEP = b"[" * 200 + b"]" * 200
# Enqueues of each shape: {key} is an Idempotency-Key prefix of its own per pass, since a
# key's second use answers its first run. Calls with a query string, or a key of a length
# FastAPI refuses, are FastAPI's either way: here they show the two paths still agree.
ENQUEUES: list[tuple[str, dict[str, str], bytes]] = [
    ("/v1/jobs/hot/runs", {}, b'{"payload": {"n": 1}}'),
    ("/v1/jobs/hot/runs", {}, b""),
    ("/v1/jobs/hot/runs", {}, b'{"priority": "critical", "delaySeconds": 30}'),
    ("/v1/jobs/hot/runs", {}, b'{"payload": 1, "colour": "red"}'),
    ("/v1/jobs/hot/runs", {}, b"{"),
    ("/v1/jobs/hot/runs", {}, b"[]"),
    ("/v1/jobs/hot/runs", {}, b'{"delaySeconds": -1}'),
    ("/v1/jobs/hot/runs", {}, b'{"runAt": "2026-01-01T00:00:00Z", "delaySeconds": 5}'),
    ("/v1/jobs/hot/runs", {}, b'{"payload": ' + DEEP + b"}"),
    ("/v1/jobs/hot/runs", {}, b'{"payload": "a\\u0000b"}'),
    ("/v1/jobs/hot/runs", {"Idempotency-Key": "{key}1"}, b'{"payload": 1}'),
    ("/v1/jobs/hot/runs", {"Idempotency-Key": "{key}1"}, b'{"payload": 1}'),
    ("/v1/jobs/hot/runs", {"Idempotency-Key": "{key}1"}, b'{"payload": 2}'),
    ("/v1/jobs/hot/runs", {"Idempotency-Key": ""}, b'{"payload": 1}'),
    ("/v1/jobs/hot/runs", {"Idempotency-Key": "{key}" + "k" * 300}, b"{}"),
    ("/v1/jobs/hot/runs?tenant=acme", {}, b"{}"),
    ("/v1/jobs/nope/runs", {}, b"{}"),
    ("/v1/jobs/Bad_Name/runs", {}, b"{}"),
    ("/v1/jobs/hot/runs/", {}, b"{}"),
    ("/v1/jobs//runs", {}, b"{}"),
    ("/v1/jobs/hot/runs:batch", {}, b'{"runs": [{}, {"payload": {"n": 2}}]}'),
    ("/v1/jobs/hot/runs:batch", {}, b'{"runs": [{"payload": 1}, {"bogus": 1}]}'),
    ("/v1/jobs/hot/runs:batch", {}, b'{"runs": []}'),
    ("/v1/jobs/hot/runs:batch", {}, b'"runs"'),
    ("/v1/jobs/hot/runs:batch", {}, b'{"runs": [{"payload": ' + DEEP + b"}]}"),
    ("/v1/jobs/nope/runs:batch", {}, b'{"runs": [{}]}'),
    ("/v1/jobs/hot/runs:batchy", {}, b'{"runs": [{}]}'),
]
RUN_ID = re.compile(r"\br\d+-\d+\b")
# What differs between two enqueues of the same body, besides run ids (RUN_ID): the
# times, and the key of a run enqueued without one (made of its id).
VOLATILE = {"dueAt", "readyAt", "createdAt", "instance"}


def _volatile(key: str, value: Any) -> bool:
    return key in VOLATILE or (key == "idempotencyKey" and "#" in str(value))


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "*" if _volatile(k, v) else _stable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


async def _enqueue_answers(
    api_server: ApiServer, token: str, key: str
) -> list[tuple[int, str | None, Any]]:
    headers = {**api_server.headers(token), "content-type": "application/json"}
    answers: list[tuple[int, str | None, Any]] = []
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as http:
        for path, extra, body in ENQUEUES:
            given = {name: value.replace("{key}", key) for name, value in extra.items()}
            response = await http.post(path, content=body, headers=given)
            text = RUN_ID.sub("r*", response.text.replace(key, "{key}"))
            document = orjson.loads(text) if text else None
            answers.append(
                (response.status_code, response.headers.get("content-type"), _stable(document))
            )
    return answers


@pytest.mark.parametrize("token", ["team_token", "worker_token", "admin_token"])
async def test_enqueues_answer_as_the_routed_calls_do(
    api_server: ApiServer, monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    async with httpx.AsyncClient(
        base_url=api_server.url, headers=api_server.headers(api_server.team_token)
    ) as http:
        assert (await http.put("/v1/jobs/hot", json={"queue": "default"})).status_code == 201
    fast = await _enqueue_answers(api_server, getattr(api_server, token), "pass-a-")
    _route_everything(monkeypatch)
    routed = await _enqueue_answers(api_server, getattr(api_server, token), "pass-b-")
    assert fast == routed
    statuses = [status for status, _, _ in fast]
    if token == "team_token":
        # Created, replayed by its key, refused for another body under it, and each check.
        assert statuses[:3] == [201, 201, 201]
        assert statuses[10:13] == [201, 200, 422]
        assert {400, 404} <= set(statuses)
    else:
        assert 403 in statuses or 400 in statuses
