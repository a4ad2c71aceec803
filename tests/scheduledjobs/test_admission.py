"""Admission: what CEL cannot check is refused by the operator's webhook, called by the
(emulated) API server from the ValidatingWebhookConfiguration the operator keeps; what
gets in anyway is marked InvalidSpec and not scheduled."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kube import emulator
from kube.status import ApiError

from tickwork.core.errors import NotFound
from tickwork.core.settings import WebhookSettings
from tickwork.engine.jobs import Jobs

from .conftest import OperatorFactory, condition, created, edited, events_of, example, scheduled_job

MERGE = {"Content-Type": "application/merge-patch+json"}
OBJECTS = "/apis/tickwork.dev/v1alpha1/namespaces/default/scheduledjobs"
CONFIGURATION = "scheduledjobs.tickwork.dev"


@pytest.fixture
async def http(cluster_kube: emulator.Emulator) -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(cluster_kube.url, timeout=timeout) as session:
        yield session


async def patch(http: aiohttp.ClientSession, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    """A merge patch through the API server's front door (admission included)."""
    async with http.patch(f"{OBJECTS}/{name}", data=json.dumps(body), headers=MERGE) as answer:
        return answer.status, await answer.json()


def invalid(field: str) -> dict[str, Any]:
    """An otherwise valid ScheduledJob with one field CEL cannot judge made wrong."""
    bodies: dict[str, dict[str, Any]] = {
        "spec.schedule.cron": {"schedule": {"cron": "61 * * * *"}},
        "spec.schedule.timeZone": {"schedule": {"cron": "0 2 * * *", "timeZone": "Mars/Olympus"}},
        "spec.payload": {"payload": {"blob": "x" * (300 * 1024)}},
        "spec.payload.password": {"payload": {"password": "hunter2-hunter2"}},
        "spec.unique.forSeconds": {
            "unique": {"states": ["scheduled", "ready", "retry_wait", "succeeded"]}
        },
        "spec.debounce.maxSeconds": {"debounce": {"seconds": 60, "maxSeconds": 30}},
    }
    return scheduled_job(field.replace(".", "-").lower(), **bodies[field])


@pytest.mark.parametrize(
    "field",
    [
        "spec.schedule.cron",
        "spec.schedule.timeZone",
        "spec.payload",
        "spec.payload.password",
        "spec.unique.forSeconds",
        "spec.debounce.maxSeconds",
    ],
)
async def test_the_webhook_refuses_what_cel_cannot_check_naming_the_field(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs, field: str
) -> None:
    document = invalid(field)
    name = document["metadata"]["name"]
    async with operator_for():
        with pytest.raises(ApiError) as raised:
            await cluster_kube.create(document, admit=True)
    assert 400 <= raised.value.code < 500
    assert (
        f'admission webhook "validate.scheduledjobs.tickwork.dev" denied the request: {field}: '
        in str(raised.value)
    )
    assert cluster_kube.get("sj", name, "default") is None
    with pytest.raises(NotFound):
        await jobs.get("default", name)


async def test_the_webhook_configuration_is_the_contracts(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory
) -> None:
    async with operator_for() as operator:
        configuration = cluster_kube.get("validatingwebhookconfigurations", CONFIGURATION)
        assert configuration is not None
        (webhook,) = configuration["webhooks"]
        assert webhook["name"] == "validate.scheduledjobs.tickwork.dev"
        assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Ignore", 5)
        assert webhook["rules"] == [
            {
                "apiGroups": ["tickwork.dev"],
                "apiVersions": ["v1alpha1"],
                "resources": ["scheduledjobs"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ]
        assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == [
            "default",
            "team-a",
        ]
        assert operator.webhook is not None
        assert webhook["clientConfig"]["url"].startswith("http://127.0.0.1:")
        assert webhook["clientConfig"]["url"].endswith("/validate")
        await created(cluster_kube, example("hello"), admit=True)
    # The CREATE, then Kopf's finalizer UPDATE (spec unchanged: allowed at once).
    assert {c.outcome for c in cluster_kube.admission.calls} == {"allowed"}
    # The configuration stays when the operator stops: with failurePolicy Ignore the
    # API server lets objects in meanwhile, and the InvalidSpec status is the backstop.
    assert cluster_kube.get("validatingwebhookconfigurations", CONFIGURATION) is not None


async def test_with_no_webhook_manage_the_configuration_is_left_to_the_chart(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory
) -> None:
    unmanaged = WebhookSettings(
        port=None, bind="127.0.0.1", host="127.0.0.1", insecure=True, manage=False
    )
    async with operator_for(webhook=unmanaged):
        await created(cluster_kube, example("hello"))
    assert cluster_kube.get("validatingwebhookconfigurations", CONFIGURATION) is None


async def test_an_invalid_object_that_got_in_is_invalid_spec_and_can_still_be_deleted(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    jobs: Jobs,
    http: aiohttp.ClientSession,
) -> None:
    async with operator_for():
        pass  # leaves its webhook configuration behind, pointing at a closed port
    # The webhook cannot be reached: failurePolicy Ignore lets the object in.
    await cluster_kube.create(invalid("spec.schedule.cron"), admit=True)
    assert [c.outcome for c in cluster_kube.admission.calls][-1] != "denied"

    async with operator_for():
        obj = await cluster_kube.wait_for(
            "sj",
            "spec-schedule-cron",
            lambda o: condition(o) is not None,
            namespace="default",
        )
        assert condition(obj) == {
            "type": "Ready",
            "status": "False",
            "reason": "InvalidSpec",
            "message": "spec.schedule.cron: " + condition(obj)["message"].split(": ", 1)[1],  # type: ignore[index]
            "lastTransitionTime": condition(obj)["lastTransitionTime"],  # type: ignore[index]
            "observedGeneration": 1,
        }
        assert "out of range" in condition(obj)["message"]  # type: ignore[index]
        with pytest.raises(NotFound):
            await jobs.get("default", "spec-schedule-cron")  # not scheduled
        await cluster_kube.wait_until(
            lambda: bool(events_of(cluster_kube, "default", "spec-schedule-cron"))
        )
        assert events_of(cluster_kube, "default", "spec-schedule-cron")[0][:2] == (
            "Warning",
            "InvalidSpec",
        )

        # An update that leaves spec alone passes the webhook; one that keeps it invalid
        # does not; and deleting it always works.
        code, _ = await patch(http, "spec-schedule-cron", {"metadata": {"labels": {"a": "b"}}})
        assert code == 200
        code, body = await patch(
            http, "spec-schedule-cron", {"spec": {"schedule": {"cron": "99 * * * *"}}}
        )
        assert code == 422 and "spec.schedule.cron: " in body["message"]
        await cluster_kube.delete("sj", "spec-schedule-cron", namespace="default")
        await cluster_kube.wait_for(
            "sj", "spec-schedule-cron", lambda o: o is None, namespace="default"
        )


async def test_an_invalid_edit_keeps_the_last_valid_definition_until_it_is_fixed(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    async with operator_for():
        await created(cluster_kube, example("nightly-report"))
        # Written past admission (a webhook outage): the zone does not exist.
        await cluster_kube.patch(
            "sj",
            "nightly-report",
            {"spec": {"schedule": {"timeZone": "Europe/Atlantis"}}},
            namespace="default",
        )
        obj = await cluster_kube.wait_for(
            "sj",
            "nightly-report",
            lambda o: (condition(o) or {}).get("reason") == "InvalidSpec",
            namespace="default",
        )
        assert obj is not None
        assert condition(obj)["message"].startswith("spec.schedule.timeZone: ")  # type: ignore[index]
        assert condition(obj)["observedGeneration"] == 2  # type: ignore[index]
        assert obj["status"]["observedGeneration"] == 1  # the generation the store runs
        definition = (await jobs.get("default", "nightly-report")).definition
        assert definition.spec.schedule is not None
        assert definition.spec.schedule.time_zone == "Europe/Berlin"

        await edited(cluster_kube, "nightly-report", {"schedule": {"timeZone": "Europe/Lisbon"}}, 3)
    definition = (await jobs.get("default", "nightly-report")).definition
    assert definition.spec.schedule is not None
    assert definition.spec.schedule.time_zone == "Europe/Lisbon"


async def test_with_the_webhook_off_the_operator_still_reconciles(
    cluster_kube: emulator.Emulator,
    operator_for: OperatorFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with operator_for(webhook=None):
        await created(cluster_kube, example("hello"))
    assert cluster_kube.get("validatingwebhookconfigurations", CONFIGURATION) is None
    assert "Admission handlers exist" not in caplog.text
