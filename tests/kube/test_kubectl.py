"""kubectl against the emulator: apply, get (with the CRD's printer columns), delete."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from kube import emulator, kubectl, samples

pytestmark = kubectl.needed


async def test_kubectl_apply_get_and_delete(kube: emulator.Emulator, tmp_path: Path) -> None:
    crd = tmp_path / "crd.yaml"
    crd.write_text(yaml.safe_dump(samples.WIDGET_CRD))
    assert "created" in await kubectl.run(kube, "apply", "--validate=false", "-f", str(crd))
    manifest = tmp_path / "widget.yaml"
    manifest.write_text(yaml.safe_dump(samples.widget("w1", color="blue")))
    assert "widget.example.dev/w1 created" in await kubectl.run(
        kube, "apply", "--validate=false", "-f", str(manifest)
    )
    assert "unchanged" in await kubectl.run(kube, "apply", "--validate=false", "-f", str(manifest))
    assert kube.get("wd", "w1", "default")["metadata"]["generation"] == 1
    manifest.write_text(yaml.safe_dump(samples.widget("w1", 5, color="blue")))
    assert "configured" in await kubectl.run(kube, "apply", "--validate=false", "-f", str(manifest))
    await kube.patch(
        "wd",
        "w1",
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "next": "2030-01-01T00:00:00Z",
            }
        },
        namespace="default",
        subresource="status",
    )

    table = (await kubectl.run(kube, "get", "wd")).splitlines()
    assert table[0].split() == ["NAME", "SIZE", "COLOR", "READY", "NEXT", "AGE"]
    assert table[1].split()[:5] == ["w1", "5", "blue", "True", "2030-01-01T00:00:00Z"]

    listed = json.loads(await kubectl.run(kube, "get", "widgets", "-o", "json"))
    (item,) = listed["items"]
    assert (item["spec"], item["metadata"]["generation"]) == ({"size": 5, "color": "blue"}, 2)
    single = json.loads(await kubectl.run(kube, "get", "widget", "w1", "-o", "json"))
    assert single["status"]["next"] == "2030-01-01T00:00:00Z"
    assert "w1" in await kubectl.run(kube, "get", "toys")  # by category

    assert 'widget.example.dev "w1" deleted' in await kubectl.run(kube, "delete", "wd", "w1")
    assert kube.get("wd", "w1", "default") is None
    assert await kubectl.run(kube, "get", "wd", "-o", "name") == ""
    namespaces = await kubectl.run(kube, "get", "namespaces")
    assert "kube-system" in namespaces and "Active" in namespaces
