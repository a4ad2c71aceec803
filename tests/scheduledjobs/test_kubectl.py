"""What a person sees with kubectl: apply the CRD and the examples, get sj with the
contract's columns, apply again (unchanged, nothing written), describe with Events."""

from __future__ import annotations

from pathlib import Path

from kube import emulator, kubectl

from .conftest import EXAMPLES, OperatorFactory, observed
from .test_crd import CRD_FILE

COLUMNS = ["NAME", "SCHEDULE", "ZONE", "PAUSED", "READY", "NEXT", "LAST", "RESULT", "JOB", "AGE"]


def version(kube: emulator.Emulator, name: str) -> str:
    obj = kube.get("sj", name, "default")
    assert obj is not None
    return str(obj["metadata"]["resourceVersion"])


def table(text: str) -> list[dict[str, str]]:
    """kubectl's columns, cut where the header's words start (a cron has spaces)."""
    header, *rows = text.rstrip("\n").splitlines()
    names = header.split()
    starts = [header.index(name) for name in names]
    ends = [*starts[1:], None]
    return [
        {name: row[start:end].strip() for name, start, end in zip(names, starts, ends, strict=True)}
        for row in rows
    ]


async def test_kubectl_get_sj_shows_the_contracts_columns(
    kube: emulator.Emulator, operator_for: OperatorFactory, tmp_path: Path
) -> None:
    # The CRD the way a cluster admin installs it (the emulator does not serve OpenAPI
    # documents, hence no client-side validation); the fixture installed the same one.
    applied = await kubectl.run(kube, "apply", "--validate=false", "-f", str(CRD_FILE))
    assert "customresourcedefinition.apiextensions.k8s.io/scheduledjobs.tickwork.dev" in applied
    async with operator_for():
        out = await kubectl.run(kube, "apply", "--validate=false", "-f", str(EXAMPLES))
        assert out.count("created") == 4
        for path in EXAMPLES.glob("*.yaml"):
            await kube.wait_for("sj", path.stem, observed(1), namespace="default")
        versions = {p.stem: version(kube, p.stem) for p in EXAMPLES.glob("*.yaml")}
        writes = sum(kube.count(verb, "scheduledjobs") for verb in ("patch", "update"))

        # Nothing the operator wrote (status, its finalizer) differs from the manifests
        # to kubectl: the second apply sends nothing, so the objects stay as they were
        # and there is no watch event for the operator to answer.
        again = await kubectl.run(kube, "apply", "--validate=false", "-f", str(EXAMPLES))
        assert again.count("unchanged") == 4
        assert sum(kube.count(verb, "scheduledjobs") for verb in ("patch", "update")) == writes
        assert {p.stem: version(kube, p.stem) for p in EXAMPLES.glob("*.yaml")} == versions

        text = await kubectl.run(kube, "get", "sj")
        rows = {row["NAME"]: row for row in table(text)}
        assert text.splitlines()[0].split() == COLUMNS
        assert rows["hello"] | {"AGE": ""} == {
            "NAME": "hello",
            "SCHEDULE": "* * * * *",
            "ZONE": "UTC",
            "PAUSED": "false",
            "READY": "True",
            "NEXT": "2026-03-15T01:01:00Z",
            "LAST": "",
            "RESULT": "",
            "JOB": "",
            "AGE": "",
        }
        assert rows["nightly-report"]["ZONE"] == "Europe/Berlin"
        assert rows["nightly-report"]["NEXT"] == "2026-03-15T01:30:00Z"
        assert set(rows) == {"hello", "nightly-report", "flaky-export", "poison-pill"}
        assert "hello" in await kubectl.run(kube, "get", "tickwork")  # the category

        described = await kubectl.run(kube, "describe", "sj", "hello")
        assert "Ready" in described and "Scheduled" in described
        assert "definition created in shard" in described  # the Event
