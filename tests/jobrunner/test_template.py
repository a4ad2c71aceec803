"""``spec.jobTemplate``: the shape the spec, the CRD and the HTTP API take and refuse,
the queue rule (a queue is the workers' or the job-runners', never both), the Job names
and the Job a template makes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ApiServer
from kube import emulator
from kube.status import ApiError
from pydantic import ValidationError

from tickwork.core import containers, limits, spec
from tickwork.core.spec import JobSpec
from tickwork.jobrunner import manifest
from tickwork.operator import crd
from tickwork.worker.client import Lease

from .conftest import TEMPLATE, spec_of


def refusal(document: dict[str, Any]) -> tuple[str | None, str]:
    with pytest.raises(ValidationError) as raised:
        spec.parse(JobSpec, document)
    first = raised.value.errors()[0]
    return spec.error_field(first), spec.error_message(first)


def with_pod(**pod: Any) -> dict[str, Any]:
    template = copy.deepcopy(TEMPLATE)
    template["spec"]["template"]["spec"].update(pod)
    return spec_of(jobTemplate=template)


def test_a_container_job_keeps_its_template_as_written() -> None:
    stored = spec.parse(JobSpec, spec_of()).to_document()
    assert stored["jobTemplate"] == TEMPLATE
    assert stored["queue"] == "containers"
    # Read back from the store: the same.
    again = JobSpec.model_validate(stored, context=spec.STORED)
    assert again.job_template == TEMPLATE


@pytest.mark.parametrize(
    ("document", "field", "message"),
    [
        ({"jobTemplate": TEMPLATE}, "queue", "set queue to 'containers'"),
        ({"jobTemplate": TEMPLATE, "queue": "billing"}, "queue", "not 'billing', which workers"),
        ({"queue": "containers-gpu"}, "queue", "a job without jobTemplate cannot run"),
        (spec_of(jobTemplate=[]), "jobTemplate", "must be an object"),
        (spec_of(jobTemplate={"spec": {}}), "jobTemplate.spec.template", "required"),
        (
            spec_of(jobTemplate={"metadata": {"name": "x"}, "spec": TEMPLATE["spec"]}),
            "jobTemplate.metadata.name",
            "unknown field",
        ),
        (
            with_pod(containers=[]),
            "jobTemplate.spec.template.spec.containers",
            "at least one container",
        ),
        (
            with_pod(containers=[{"name": "main"}]),
            "jobTemplate.spec.template.spec.containers[0].image",
            "the container's image",
        ),
        (
            with_pod(containers=[{"name": "Main", "image": "x"}]),
            "jobTemplate.spec.template.spec.containers[0].name",
            "DNS-1123 label",
        ),
        (
            with_pod(initContainers=[{"name": "init", "image": " "}]),
            "jobTemplate.spec.template.spec.initContainers[0].image",
            "the container's image",
        ),
        (
            with_pod(restartPolicy="Always"),
            "jobTemplate.spec.template.spec.restartPolicy",
            "Never or OnFailure",
        ),
        (
            with_pod(volumes=[{"name": "x" * limits.MAX_JOB_TEMPLATE_BYTES}]),
            "jobTemplate",
            f"the limit is {limits.MAX_JOB_TEMPLATE_BYTES}",
        ),
    ],
    ids=[
        "no-queue",
        "workers-queue",
        "runner-queue-without-template",
        "not-an-object",
        "no-pod-template",
        "job-metadata",
        "no-containers",
        "no-image",
        "bad-name",
        "blank-init-image",
        "restart-always",
        "too-large",
    ],
)
def test_what_the_spec_refuses_names_the_field(
    document: dict[str, Any], field: str, message: str
) -> None:
    found_field, found_message = refusal(document)
    assert found_field == field
    assert message in found_message


def test_job_names_are_stable_short_dns_labels() -> None:
    assert containers.job_name("nightly-report", "r3-1207", 2) == "nightly-report-r3-1207-2"
    assert containers.job_name("a.b.c", "r0-1", 1) == "a-b-c-r0-1-1"
    long = containers.job_name("x" * 253, "r12-9223372036854775807", 100)
    assert len(long) == 63 and long.endswith("-r12-9223372036854775807-100")
    assert long == containers.job_name("x" * 253, "r12-9223372036854775807", 100)
    # Names that differ only past the cut still differ by their run.
    assert containers.job_name("y" * 80 + "a", "r1-5", 1) != containers.job_name(
        "y" * 80 + "b", "r1-6", 1
    )
    assert containers.label_value("z" * 100) != containers.label_value("z" * 99)
    assert len(containers.label_value("z" * 100)) <= 63


def _lease(payload: Any = None, attempt: int = 3) -> Lease:
    return Lease(
        run_id="r1-42",
        job="export",
        tenant="acme",
        queue="containers",
        priority="default",
        attempt=attempt,
        idempotency_key="acme/export@2026-03-15T02:00:00Z",
        fencing_token=77,
        due_at=None,
        lease_expires_at=None,
        deadline=None,
        payload=payload,
    )


def test_the_runners_settings_win_over_the_templates() -> None:
    template = copy.deepcopy(TEMPLATE)
    template["spec"].update(backoffLimit=6, activeDeadlineSeconds=10, ttlSecondsAfterFinished=60)
    sj = {"metadata": {"name": "export", "uid": "u-1"}}
    job = manifest.build(_lease(), sj, template, timeout_seconds=120, ttl_seconds=86_400)
    # tickwork retries and times the attempt; the template's own TTL is kept.
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (0, 120)
    assert job["spec"]["ttlSecondsAfterFinished"] == 60
    assert manifest.attempt_of(job) == manifest.Attempt(
        namespace="acme",
        name="export-r1-42-3",
        job="export",
        run_id="r1-42",
        attempt=3,
        queue="containers",
        fencing_token=77,
    )
    assert TEMPLATE["spec"].get("backoffLimit") is None  # the template is not touched


def test_an_image_that_writes_no_termination_log_still_says_why_it_failed() -> None:
    template = copy.deepcopy(TEMPLATE)
    template["spec"]["template"]["spec"]["containers"][1]["terminationMessagePolicy"] = "File"
    sj = {"metadata": {"name": "export", "uid": "u-1"}}
    job = manifest.build(_lease(), sj, template, timeout_seconds=120, ttl_seconds=86_400)
    pod = job["spec"]["template"]["spec"]
    every = pod["initContainers"] + pod["containers"]
    policies = [container.get("terminationMessagePolicy") for container in every]
    # The end of the log becomes the message, unless the template chose otherwise.
    assert policies == ["FallbackToLogsOnError", "FallbackToLogsOnError", "File"]


def test_a_failed_jobs_message_names_the_last_container_that_failed() -> None:
    job = {
        "status": {
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                },
            ]
        }
    }
    pods = [
        {
            "status": {
                "initContainerStatuses": [
                    {"name": "init", "state": {"terminated": {"exitCode": 0, "finishedAt": "1"}}}
                ],
                "containerStatuses": [
                    {
                        "name": "main",
                        "state": {
                            "terminated": {"exitCode": 3, "finishedAt": "2", "message": "boom\n"}
                        },
                    },
                    {"name": "side", "state": {"terminated": {"exitCode": 0, "finishedAt": "3"}}},
                ],
            }
        }
    ]
    assert manifest.state_of(job) is manifest.State.failed
    assert manifest.error_message("j", job, pods) == (
        "Job j failed: BackoffLimitExceeded: Job has reached the specified backoff limit; "
        "container main: boom"
    )
    assert manifest.termination([]) is None


async def test_the_crd_takes_a_template_as_kubernetes_would_and_refuses_a_bad_one(
    kube: emulator.Emulator,
) -> None:
    await kube.create(crd.definition())
    template = copy.deepcopy(TEMPLATE)
    pod = template["spec"]["template"]["spec"]
    pod["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    template["spec"]["parallelism"] = 1
    body = {
        "apiVersion": "tickwork.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "export", "namespace": "default"},
        "spec": spec_of(jobTemplate=template),
    }
    created = await kube.create(body)
    assert created["spec"]["jobTemplate"] == template  # preserved, nothing pruned
    JobSpec.model_validate(created["spec"])

    refused = {
        "no queue": ({"jobTemplate": template}, "set queue to 'containers'"),
        "runner queue, no template": ({"queue": "containers"}, "without jobTemplate"),
        "no containers": (with_pod(containers=[]), "containers"),
        "no image": (with_pod(containers=[{"name": "main"}]), "image"),
        "restart always": (with_pod(restartPolicy="Always"), "restartPolicy"),
    }
    for label, (document, message) in refused.items():
        bad = {**body, "metadata": {"name": "refused", "namespace": "default"}, "spec": document}
        with pytest.raises(ApiError) as raised:
            await kube.create(bad)
        assert raised.value.code == 422, label
        assert message in str(raised.value), label


async def test_the_api_takes_the_same_spec(api_server: ApiServer) -> None:
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as team:
        put = await team.put("/v1/jobs/export", json=spec_of())
        assert put.status_code == 201, put.text
        got = await team.get("/v1/jobs/export")
        assert got.json()["spec"]["jobTemplate"] == TEMPLATE
        refused = await team.put("/v1/jobs/export", json={"jobTemplate": TEMPLATE})
        assert refused.status_code == 400
        assert refused.json()["field"] == "queue"
        schema = (await team.get("/openapi.json")).json()
        properties = schema["components"]["schemas"]["JobSpec"]["properties"]
        assert "jobTemplate" in properties


def test_the_end_to_end_container_job_is_a_valid_scheduled_job() -> None:
    import yaml

    from tickwork.engine import manifests

    text = (Path(__file__).resolve().parents[2] / "e2e" / "container-job.yaml").read_text()
    parsed = manifests.parse_document(yaml.safe_load(text.replace("IMAGE", "tickwork:e2e")), "e2e")
    assert parsed is not None and parsed.spec.job_template is not None
    assert parsed.spec.queue == containers.QUEUE
