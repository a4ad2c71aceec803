"""Kopf in-process against the emulator: a toy handler on the toy CRD."""

from __future__ import annotations

import json
from typing import Any

import kopf
import pytest

from kube import emulator, operators, samples


def _phase(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("status") or {}).get("phase")


def _handled_size(obj: dict[str, Any] | None) -> int | None:
    stored = (((obj or {}).get("status") or {}).get("kopf") or {}).get("last-handled-configuration")
    return json.loads(stored)["spec"]["size"] if stored else None


@pytest.mark.parametrize("clusterwide", [False, True], ids=["namespaced", "clusterwide-scanning"])
async def test_kopf_creates_once_finalizes_and_patches_status(
    widgets: emulator.Emulator, clusterwide: bool
) -> None:
    # Cluster-wide, Kopf also scans and watches CRDs and namespaces.
    settings = operators.quick_settings()
    settings.scanning.disabled = not clusterwide
    registry = kopf.OperatorRegistry()
    operators.connect(registry, widgets)
    created: list[str] = []
    updated: list[int] = []
    deleted: list[str] = []

    @kopf.on.create(samples.GROUP, "v1", "widgets", registry=registry)
    async def create_fn(name: str, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        created.append(name)
        patch.status["phase"] = "Ready"
        kopf.info(body, reason="Scheduled", message=f"{name} stored")

    @kopf.on.update(samples.GROUP, "v1", "widgets", registry=registry, field="spec.size")
    async def update_fn(new: int, **_: Any) -> None:
        updated.append(new)

    @kopf.on.delete(samples.GROUP, "v1", "widgets", registry=registry)
    async def delete_fn(name: str, **_: Any) -> None:
        deleted.append(name)

    await widgets.create(samples.widget("early"))  # there before the operator starts
    async with operators.running(registry, settings=settings, clusterwide=clusterwide):
        early = await widgets.wait_for(
            "wd", "early", lambda o: _phase(o) == "Ready", namespace="default"
        )
        assert early is not None
        assert early["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]
        assert "annotations" not in early["metadata"]  # bookkeeping lives in status
        await widgets.create(samples.widget("late"))
        await widgets.wait_for("wd", "late", lambda o: _phase(o) == "Ready", namespace="default")
        await widgets.patch("wd", "late", {"spec": {"size": 7 - 1}}, namespace="default")
        await widgets.wait_for("wd", "late", lambda o: _handled_size(o) == 6, namespace="default")
        await widgets.delete("wd", "late", namespace="default")
        await widgets.wait_for("wd", "late", lambda o: o is None, namespace="default")
        await widgets.wait_until(lambda: len(widgets.objects("events", "default")) == 2)

    assert created == ["early", "late"]
    assert updated == [6]
    assert deleted == ["late"]
    (event,) = [
        e for e in widgets.objects("events", "default") if e["involvedObject"]["name"] == "early"
    ]
    assert (event["reason"], event["message"], event["type"]) == (
        "Scheduled",
        "early stored",
        "Normal",
    )
    assert event["involvedObject"]["uid"] == early["metadata"]["uid"]
    # Kopf's finalizer patches are JSON patches guarded by a resourceVersion test.
    assert widgets.count("patch", "widgets") > 0 and widgets.count("patch", "widgets/status") > 0

    # A restarted operator finds its bookkeeping in status: nothing is created twice.
    async with operators.running(registry, settings=settings, clusterwide=clusterwide):
        await widgets.create(samples.widget("third"))
        await widgets.wait_for("wd", "third", lambda o: _phase(o) == "Ready", namespace="default")
    assert created == ["early", "late", "third"]
    assert (widgets.count("watch", "customresourcedefinitions") > 0) == clusterwide
    assert widgets.count("watch", "widgets", namespace="" if clusterwide else "default") == 2


async def test_kopf_managed_admission_is_called_by_the_emulator(widgets: emulator.Emulator) -> None:
    registry = kopf.OperatorRegistry()
    operators.connect(registry, widgets)
    settings = operators.quick_settings()
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1", port=None, host="127.0.0.1", insecure=True
    )
    settings.admission.managed = "widgets.example.dev"

    @kopf.on.validate(
        samples.GROUP, "v1", "widgets", registry=registry, operations=["CREATE", "UPDATE"]
    )
    def check_name(spec: kopf.Spec, **_: Any) -> None:
        if spec.get("name") == "taken":
            raise kopf.AdmissionError("spec.name: this name is taken", code=422)

    async with operators.running(registry, settings=settings):
        configuration = await widgets.wait_for(
            "validatingwebhookconfigurations",
            "widgets.example.dev",
            lambda o: bool(o and o.get("webhooks")),
        )
        assert configuration is not None
        assert configuration["webhooks"][0]["clientConfig"]["url"].startswith("http://127.0.0.1:")
        assert (await widgets.create(samples.widget("fine"), admit=True))["metadata"][
            "name"
        ] == "fine"
        try:
            await widgets.create(samples.widget("bad", name="taken"), admit=True)
        except Exception as error:  # the emulator's Status error, as the API server answers it
            refused = error
        else:
            raise AssertionError("the webhook let a forbidden name in")
    assert getattr(refused, "code", None) == 422
    assert "spec.name: this name is taken" in str(refused)
    assert widgets.get("wd", "bad", "default") is None
    assert [c.outcome for c in widgets.admission.calls] == ["allowed", "denied"]
