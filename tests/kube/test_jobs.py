"""batch/v1 Jobs and core/v1 Pods in the emulator: stored and validated as the API
server does what the job-runner relies on (a name its pods' job-name label holds, a pod
template a Job allows, status written through its subresource only), and moved through
their conditions by the tests' own Job controller (kube.jobs)."""

from __future__ import annotations

import pytest

from kube import emulator
from kube.jobs import JobController
from kube.status import ApiError


def job(name: str, **pod: object) -> dict[str, object]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                    **pod,
                },
            }
        },
        "status": {"active": 1},
    }


async def test_jobs_are_validated_and_their_status_is_a_subresource(
    kube: emulator.Emulator,
) -> None:
    created = await kube.create(job("a" * 63))
    assert "status" not in created
    for bad, field in (
        (job("a" * 64), "metadata.name"),
        (job("b", restartPolicy="Always"), "restartPolicy"),
        (job("c", containers=[]), "containers"),
    ):
        with pytest.raises(ApiError) as raised:
            await kube.create(bad)
        assert raised.value.code == 422 and field in str(raised.value)

    controller = JobController(kube, "default")
    await controller.fail("a" * 63, "out of cheese")
    failed = kube.get("jobs", "a" * 63, "default")
    assert failed is not None
    assert [c["type"] for c in failed["status"]["conditions"]] == ["Failed"]
    [pod] = kube.objects("pods", "default")
    assert pod["metadata"]["labels"]["job-name"] == "a" * 63
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["message"]) == (2, "out of cheese")
