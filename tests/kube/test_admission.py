"""Validating admission: webhooks registered in ValidatingWebhookConfiguration objects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kube import emulator, samples
from kube.reviews import User
from kube.test_emulator import MERGE, call

VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"

Answer = Callable[[dict[str, Any]], Any]


class Webhook:
    """A webhook server on 127.0.0.1 whose answer each test scripts."""

    def __init__(self) -> None:
        self.reviews: list[dict[str, Any]] = []
        self.answer: Answer = lambda request: {"allowed": True}
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.reviews.append(review)
        outcome = self.answer(review["request"])
        if asyncio.iscoroutine(outcome):
            outcome = await outcome
        if isinstance(outcome, web.Response):
            return outcome
        response = {"uid": review["request"]["uid"], **outcome}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


@pytest.fixture
async def webhook() -> AsyncIterator[Webhook]:
    hook = Webhook()
    app = web.Application()
    app.router.add_post("/{tail:.*}", hook.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    hook.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield hook
    await runner.cleanup()


def configuration(url: str | None = None, **webhook: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": "validate.widgets.example.dev",
        "clientConfig": {"url": f"{url}/validate"} if url else webhook.pop("clientConfig"),
        "rules": [
            {
                "apiGroups": ["example.dev"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["widgets"],
                "scope": "Namespaced",
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Fail",
        "timeoutSeconds": 1,
    }
    entry.update(webhook)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "widgets.example.dev"},
        "webhooks": [entry],
    }


async def test_the_webhook_gets_a_real_admission_review(
    widgets: emulator.Emulator, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    await widgets.create(configuration(webhook.url))
    widgets.tokens["team-token"] = User("alice", uid="u-1", groups=("devs",))
    code, _ = await call(
        http, "POST", samples.WIDGETS, samples.widget("a"), {"Authorization": "Bearer team-token"}
    )
    assert code == 201
    await call(http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"size": 4}}, MERGE)
    await call(http, "PATCH", f"{samples.WIDGETS}/a/status", {"status": {"phase": "x"}}, MERGE)
    create, update = (r["request"] for r in webhook.reviews)
    assert webhook.reviews[0]["apiVersion"] == "admission.k8s.io/v1"
    assert create["operation"] == "CREATE" and update["operation"] == "UPDATE"
    assert create["uid"] != update["uid"]
    assert create["kind"] == {"group": "example.dev", "version": "v1", "kind": "Widget"}
    assert create["resource"] == {"group": "example.dev", "version": "v1", "resource": "widgets"}
    assert (create["name"], create["namespace"]) == ("a", "default")
    assert create["object"]["spec"] == {"size": 3, "color": "red"}  # defaulted, as admitted
    assert create["oldObject"] is None and create["dryRun"] is False
    assert create["userInfo"] == {"username": "alice", "uid": "u-1", "groups": ["devs"]}
    assert create["options"]["kind"] == "CreateOptions"
    assert update["oldObject"]["spec"]["size"] == 3 and update["object"]["spec"]["size"] == 4
    assert len(webhook.reviews) == 2  # the status write matched no rule
    assert [c.outcome for c in widgets.admission.calls] == ["allowed", "allowed"]


async def test_a_denial_answers_the_webhooks_code_and_message(
    widgets: emulator.Emulator, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    await widgets.create(configuration(webhook.url))
    webhook.answer = lambda request: {
        "allowed": False,
        "status": {
            "code": 422,
            "message": "spec.schedule.cron: not a cron expression",
            "reason": "Invalid",
        },
    }
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["message"] == (
        'admission webhook "validate.widgets.example.dev" denied the request: '
        "spec.schedule.cron: not a cron expression"
    )
    assert widgets.get("widgets", "a", "default") is None
    webhook.answer = lambda request: {"allowed": False}
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert code == 400 and body["message"].endswith("denied the request without explanation")


async def test_failure_policy_on_timeouts_and_unreachable_webhooks(
    widgets: emulator.Emulator, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    async def slow(request: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(1.2)  # past the webhook's timeoutSeconds of 1
        return {"allowed": True}

    webhook.answer = slow
    await widgets.create(configuration(webhook.url))
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert (code, body["reason"]) == (500, "InternalError")
    assert 'failed calling webhook "validate.widgets.example.dev"' in body["message"]
    assert "context deadline exceeded" in body["message"]
    assert widgets.get("wd", "a", "default") is None

    unreachable = configuration("http://127.0.0.1:9")["webhooks"][0]
    await widgets.patch(
        "validatingwebhookconfigurations",
        "widgets.example.dev",
        {"webhooks": [{**unreachable, "failurePolicy": "Ignore"}]},
    )
    assert (await call(http, "POST", samples.WIDGETS, samples.widget("a")))[0] == 201
    await widgets.patch(
        "validatingwebhookconfigurations",
        "widgets.example.dev",
        {"webhooks": [{**unreachable, "failurePolicy": "Fail"}]},
    )
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("b"))
    assert code == 500 and 'Post "http://127.0.0.1:9/validate"' in body["message"]
    assert [c.outcome for c in widgets.admission.calls] == ["error", "ignored-error", "error"]


async def test_a_service_reference_resolves_through_the_test_mapping(
    widgets: emulator.Emulator, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    service = {
        "service": {"namespace": "tickwork", "name": "operator", "path": "/validate", "port": 443}
    }
    await widgets.create(configuration(clientConfig=service))
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert code == 500 and "kube.services" in body["message"]
    widgets.services[("tickwork", "operator")] = webhook.url
    assert (await call(http, "POST", samples.WIDGETS, samples.widget("a")))[0] == 201
    assert len(webhook.reviews) == 1


async def test_rules_and_selectors_choose_which_calls_are_sent(
    widgets: emulator.Emulator, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    await widgets.create_namespace("watched", labels={"admission": "on"})
    config = configuration(
        webhook.url,
        namespaceSelector={"matchLabels": {"admission": "on"}},
        objectSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
        matchConditions=[
            {"name": "not-system", "expression": "request.userInfo.username != 'system:skip'"}
        ],
    )
    config["webhooks"][0]["rules"][0]["operations"] = ["UPDATE"]
    await widgets.create(config)
    watched = samples.WIDGETS.replace("default", "watched")
    await call(http, "POST", watched, samples.widget("a"))  # CREATE: not in the rule
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    await call(
        http, "PATCH", f"{samples.WIDGETS}/a", {"spec": {"size": 4}}, MERGE
    )  # unselected namespace
    await call(http, "PATCH", f"{watched}/a", {"spec": {"size": 4}}, MERGE)  # sent
    skipped = {"metadata": {"labels": {"skip": "yes"}}, "spec": {"size": 5}}
    await call(http, "PATCH", f"{watched}/a", skipped, MERGE)  # the old object still matches: sent
    await call(
        http, "PATCH", f"{watched}/a", {"spec": {"size": 6}}, MERGE
    )  # both carry skip: not sent
    widgets.tokens["skip"] = User("system:skip")
    unlabel = {"metadata": {"labels": {"skip": None}}, "spec": {"size": 7}}
    await call(http, "PATCH", f"{watched}/a", unlabel, {**MERGE, "Authorization": "Bearer skip"})
    await call(http, "PATCH", f"{watched}/a", {"spec": {"size": 8}}, MERGE)  # sent
    assert [r["request"]["object"]["spec"]["size"] for r in webhook.reviews] == [4, 5, 8]
    assert widgets.get("widgets", "a", "watched")["spec"]["size"] == 8


async def test_dry_run_and_uid_mismatch(
    widgets: emulator.Emulator, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    await widgets.create(configuration(webhook.url))
    assert (await call(http, "POST", samples.WIDGETS, samples.widget("a"), dryRun="All"))[0] == 201
    assert webhook.reviews[-1]["request"]["dryRun"] is True
    webhook.answer = lambda request: web.json_response(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "someone-else", "allowed": True},
        }
    )
    code, body = await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    assert code == 500 and "expected response.uid" in body["message"]


async def test_webhook_configurations_are_validated(
    kube: emulator.Emulator, http: aiohttp.ClientSession
) -> None:
    bad = configuration("http://127.0.0.1:1", name="short", sideEffects="Some", timeoutSeconds=60)
    code, body = await call(http, "POST", VWC, bad)
    assert code == 422
    fields = {c["field"] for c in body["details"]["causes"]}
    assert fields == {"webhooks[0].name", "webhooks[0].sideEffects", "webhooks[0].timeoutSeconds"}


async def test_delete_is_admitted_with_the_old_object(
    widgets: emulator.Emulator, http: aiohttp.ClientSession, webhook: Webhook
) -> None:
    config = configuration(webhook.url)
    config["webhooks"][0]["rules"][0]["operations"] = ["DELETE"]
    await widgets.create(config)
    await call(http, "POST", samples.WIDGETS, samples.widget("a"))
    denial = {"allowed": False, "status": {"code": 403, "message": "keep it"}}
    webhook.answer = lambda request: denial
    code, body = await call(http, "DELETE", f"{samples.WIDGETS}/a")
    assert (code, body["message"]) == (
        403,
        'admission webhook "validate.widgets.example.dev" denied the request: keep it',
    )
    assert widgets.get("wd", "a", "default") is not None
    (review,) = webhook.reviews
    request = review["request"]
    assert (request["operation"], request["object"]) == ("DELETE", None)
    assert request["oldObject"]["metadata"]["name"] == "a"
    assert request["options"]["kind"] == "DeleteOptions"
