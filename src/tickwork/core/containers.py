"""Container jobs: the rules every part agrees on.

A job with ``jobTemplate`` (a batch/v1 JobTemplateSpec, as in a CronJob) is run by
``tickwork job-runner``, which creates one Kubernetes Job per leased attempt. The spec
validates the template and the queue rule here; the runner names, labels and fills its
Jobs from here; the operator derives ``status.lastJobName`` from here. Pure functions
and constants, no framework.

The queue rule: container jobs are leased from the queues only job-runners serve,
``containers`` or ``containers-<anything>``. A job with ``jobTemplate`` must name such
a queue, and a job without one must not (its runs would go to a runner that has
nothing to run): a queue is never shared between workers and runners, so which of
them runs a job is never ambiguous.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Final

import orjson

from tickwork.core import fields, limits

# --- the queue rule ---

QUEUE: Final = "containers"
"""The job-runner's queue by default."""

_QUEUE_PREFIX: Final = QUEUE + "-"
QUEUE_RULE: Final = (
    "queues named 'containers' or 'containers-<name>' are served by `tickwork job-runner` only"
)


def is_runner_queue(queue: str) -> bool:
    """Whether job-runners (and only they) lease ``queue``."""
    return queue == QUEUE or queue.startswith(_QUEUE_PREFIX)


def queue_problem(queue: str, container: bool) -> str | None:
    """Why a job with (``container``) or without a jobTemplate cannot use ``queue``."""
    if container and not is_runner_queue(queue):
        return (
            f"a job with jobTemplate is run by `tickwork job-runner`: set queue to "
            f"{QUEUE!r} (or '{_QUEUE_PREFIX}<name>'), not {queue!r}, which workers serve"
        )
    if not container and is_runner_queue(queue):
        return f"{QUEUE_RULE}: a job without jobTemplate cannot run in queue {queue!r}"
    return None


# --- the Jobs a runner creates ---

LABEL_JOB: Final = "tickwork.dev/job"
LABEL_RUN: Final = "tickwork.dev/run"
LABEL_ATTEMPT: Final = "tickwork.dev/attempt"
LABEL_QUEUE: Final = "tickwork.dev/queue"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "tickwork-job-runner"
ANNOTATION_JOB: Final = "tickwork.dev/job"  # the full job name (a label holds 63 chars)
ANNOTATION_FENCING_TOKEN: Final = "tickwork.dev/fencing-token"  # noqa: S105 - a key
ANNOTATION_PAYLOAD: Final = "tickwork.dev/payload"  # the pod's, for a payload file

ENV_RUN_ID: Final = "TICKWORK_RUN_ID"
ENV_ATTEMPT: Final = "TICKWORK_ATTEMPT"
ENV_DUE_AT: Final = "TICKWORK_DUE_AT"
ENV_IDEMPOTENCY_KEY: Final = "TICKWORK_IDEMPOTENCY_KEY"
ENV_FENCING_TOKEN: Final = "TICKWORK_FENCING_TOKEN"  # noqa: S105 - a name
ENV_PAYLOAD: Final = "TICKWORK_PAYLOAD"
ENV_PAYLOAD_FILE: Final = "TICKWORK_PAYLOAD_FILE"
ENV_NAMES: Final = frozenset(
    {
        ENV_RUN_ID,
        ENV_ATTEMPT,
        ENV_DUE_AT,
        ENV_IDEMPOTENCY_KEY,
        ENV_FENCING_TOKEN,
        ENV_PAYLOAD,
        ENV_PAYLOAD_FILE,
    }
)

PAYLOAD_ENV_BYTES: Final = 32 * 1024
"""A payload up to this size (encoded) is passed in ``TICKWORK_PAYLOAD``; a larger one in
a file (``TICKWORK_PAYLOAD_FILE``). Linux refuses to start a program with a single
environment string over 128 KiB, and every container of the pod gets the variable."""

PAYLOAD_DIR: Final = "/var/run/tickwork"
PAYLOAD_FILE: Final = PAYLOAD_DIR + "/payload.json"
PAYLOAD_VOLUME: Final = "tickwork-payload"

_NAME_LIMIT: Final = 63  # a Job's name is its pods' job-name label value
_NOT_NAME: Final = re.compile(r"[^a-z0-9-]+")


def job_name(job: str, run_id: str, attempt: int) -> str:
    """The name of the Job of ``attempt`` of run ``run_id``: the job's name (shortened),
    the run id and the attempt, e.g. ``nightly-report-r3-1207-2``. Stable, so a runner
    that crashed, or one that leases the same attempt again, finds the Job instead of
    creating another; a DNS-1123 label of at most 63 characters."""
    suffix = f"-{_NOT_NAME.sub('-', run_id.lower()).strip('-')}-{attempt}"
    prefix = _NOT_NAME.sub("-", job.lower()).strip("-")
    prefix = prefix[: _NAME_LIMIT - len(suffix)].rstrip("-")
    return (prefix + suffix).lstrip("-")


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 characters): job names longer than that
    keep their first 52 characters and a hash of the whole."""
    if len(text) <= _NAME_LIMIT:
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
    return f"{text[:52].rstrip('-.')}-{digest}"


# --- the template ---

MAX_TEMPLATE_BYTES: Final = limits.MAX_JOB_TEMPLATE_BYTES
_LABEL_NAME: Final = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_CONTAINER_LISTS: Final = ("containers", "initContainers")
RESTART_POLICIES: Final = ("Never", "OnFailure")


class TemplateError(ValueError):
    """A jobTemplate Kubernetes would not take as a Job's; ``path`` names the part
    (``spec.template.spec.containers[0].image``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def check_template(template: Any) -> None:
    """Raise ``TemplateError`` unless ``template`` has the shape of a JobTemplateSpec a
    runner can make a Job of: ``metadata`` (labels, annotations) and ``spec`` with
    ``template.spec.containers``, each container named (a DNS-1123 label) and with an
    image, and a ``restartPolicy`` a Job allows. What else the pod spec holds is
    Kubernetes' to check when the Job is created."""
    if not isinstance(template, Mapping):
        raise TemplateError("", "must be an object: a batch/v1 JobTemplateSpec (metadata, spec)")
    size = len(orjson.dumps(template))
    if size > MAX_TEMPLATE_BYTES:
        raise TemplateError("", f"is {size} bytes encoded; the limit is {MAX_TEMPLATE_BYTES}")
    _only(template, ("metadata", "spec"), "")
    metadata = _object(template, "metadata", "", required=False)
    _only(metadata, ("labels", "annotations"), "metadata")
    for key in ("labels", "annotations"):
        _strings(_object(metadata, key, "metadata", required=False), fields.key("metadata", key))
    spec = _object(template, "spec", "", required=True)
    pod_template = _object(spec, "template", "spec", required=True)
    pod = _object(pod_template, "spec", "spec.template", required=True)
    where = "spec.template.spec"
    policy = pod.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        raise TemplateError(
            f"{where}.restartPolicy", f"must be Never or OnFailure (a Job's pods), not {policy!r}"
        )
    for list_name in _CONTAINER_LISTS:
        items = pod.get(list_name)
        path = f"{where}.{list_name}"
        if items is None and list_name == "initContainers":
            continue
        if not isinstance(items, list) or (list_name == "containers" and not items):
            raise TemplateError(path, "must be a list of at least one container")
        for index, container in enumerate(items):
            _container(container, fields.index(path, index))


def _container(container: Any, path: str) -> None:
    if not isinstance(container, Mapping):
        raise TemplateError(path, "must be an object")
    name = container.get("name")
    if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name):
        raise TemplateError(
            f"{path}.name", "required: a DNS-1123 label (lowercase letters, digits, '-')"
        )
    image = container.get("image")
    if not isinstance(image, str) or not image.strip():
        raise TemplateError(f"{path}.image", "required: the container's image")
    env = container.get("env")
    if env is not None and not isinstance(env, list):
        raise TemplateError(f"{path}.env", "must be a list")


def _only(mapping: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in mapping:
        if key not in allowed:
            shown = ", ".join(allowed)
            raise TemplateError(fields.key(path, str(key)), f"unknown field (allowed: {shown})")


def _object(parent: Mapping[str, Any], key: str, path: str, *, required: bool) -> dict[str, Any]:
    value = parent.get(key)
    where = fields.key(path, key)
    if value is None:
        if required:
            raise TemplateError(where, "required")
        return {}
    if not isinstance(value, dict):
        raise TemplateError(where, "must be an object")
    return value


def _strings(mapping: Mapping[str, Any], path: str) -> None:
    for key, value in mapping.items():
        if not isinstance(value, str):
            raise TemplateError(fields.key(path, str(key)), "must be a string")


def template_schema(*, closed: bool) -> dict[str, Any]:
    """The JSON schema of ``jobTemplate``. ``closed``: unknown fields where the spec
    refuses them are refused (``additionalProperties: false``, the API's document);
    otherwise they are left out, for a CRD, whose API server prunes undeclared fields
    and keeps the pod's as given (``x-kubernetes-preserve-unknown-fields``)."""

    def strings(description: str) -> dict[str, Any]:
        return {
            "type": "object",
            "description": description,
            "additionalProperties": {"type": "string"},
        }

    def container() -> dict[str, Any]:
        return {
            "type": "object",
            "description": "A container (core/v1 Container): every field Kubernetes takes; "
            "the runner adds the TICKWORK_* variables to its env.",
            "required": ["name", "image"],
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "name": {
                    "type": "string",
                    "description": "The container's name (a DNS-1123 label).",
                    "maxLength": 63,
                    "pattern": f"^{_LABEL_NAME.pattern}$",
                },
                "image": {
                    "type": "string",
                    "description": "The container's image.",
                    "minLength": 1,
                    "pattern": r"\S",
                },
            },
        }

    metadata: dict[str, Any] = {
        "type": "object",
        "description": "Labels and annotations of every Job made from the template.",
        "properties": {
            "labels": strings("Labels of each Job."),
            "annotations": strings("Annotations of each Job."),
        },
    }
    schema: dict[str, Any] = {
        "type": "object",
        "description": "Run each attempt as a Kubernetes Job made from this batch/v1 "
        "JobTemplateSpec (as a CronJob's jobTemplate), by `tickwork job-runner`, instead of "
        "a worker's handler; queue must then be 'containers' or 'containers-<name>'. The "
        "runner sets backoffLimit 0 (tickwork retries), activeDeadlineSeconds from "
        "timeoutSeconds, the TICKWORK_* variables of every container, labels and an owner "
        f"reference; ≤ {MAX_TEMPLATE_BYTES // 1024} KiB encoded.",
        "required": ["spec"],
        "properties": {
            "metadata": metadata,
            "spec": {
                "type": "object",
                "description": "The Job's spec (batch/v1 JobSpec): every field Kubernetes takes.",
                "required": ["template"],
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "template": {
                        "type": "object",
                        "description": "The pod template (core/v1 PodTemplateSpec).",
                        "required": ["spec"],
                        "properties": {
                            "metadata": {
                                "type": "object",
                                "description": "Labels and annotations of each pod.",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                            "spec": {
                                "type": "object",
                                "description": "The pod's spec (core/v1 PodSpec); "
                                "restartPolicy Never unless OnFailure is given.",
                                "required": ["containers"],
                                "x-kubernetes-preserve-unknown-fields": True,
                                "properties": {
                                    "containers": {
                                        "type": "array",
                                        "description": "The pod's containers (at least one).",
                                        "minItems": 1,
                                        "items": container(),
                                    },
                                    "initContainers": {
                                        "type": "array",
                                        "description": "The pod's init containers.",
                                        "items": container(),
                                    },
                                    "restartPolicy": {
                                        "type": "string",
                                        "description": "Never (the default here) or OnFailure.",
                                        "enum": list(RESTART_POLICIES),
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    }
    if closed:
        schema["additionalProperties"] = False
        metadata["additionalProperties"] = False
    return schema
