"""The Job of one attempt, and what a Job says of its attempt: pure functions over
plain JSON (core.containers names the names, labels and variables)."""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from tickwork.core import containers
from tickwork.worker.client import Lease

SCHEDULED_JOB_API: Final = "tickwork.dev/v1alpha1"
SCHEDULED_JOB_KIND: Final = "ScheduledJob"
_MESSAGE_LIMIT: Final = 4000  # of a run's error message, in characters
_PAYLOAD_FIELD: Final = f"metadata.annotations['{containers.ANNOTATION_PAYLOAD}']"


class State(enum.Enum):
    active = "active"  # not finished (pods pending or running)
    succeeded = "succeeded"  # condition Complete
    failed = "failed"  # condition Failed
    gone = "gone"  # deleted, or being deleted


@dataclass(frozen=True, slots=True)
class Attempt:
    """Which attempt a Job runs, as its labels and annotations say."""

    namespace: str
    name: str
    job: str
    run_id: str
    attempt: int
    queue: str
    fencing_token: int

    def lease(self) -> Lease:
        """The lease this Job was made under, for heartbeats and completions."""
        return Lease(
            run_id=self.run_id,
            job=self.job,
            tenant=self.namespace,
            queue=self.queue,
            priority="default",
            attempt=self.attempt,
            idempotency_key="",
            fencing_token=self.fencing_token,
            due_at=None,
            lease_expires_at=None,
            deadline=None,
            payload=None,
        )


def attempt_of(job: Mapping[str, Any]) -> Attempt | None:
    """The attempt a Job of a job-runner runs; None for a Job that is not one."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    try:
        return Attempt(
            namespace=str(meta["namespace"]),
            name=str(meta["name"]),
            job=str(annotations[containers.ANNOTATION_JOB]),
            run_id=str(labels[containers.LABEL_RUN]),
            attempt=int(labels[containers.LABEL_ATTEMPT]),
            queue=str(labels[containers.LABEL_QUEUE]),
            fencing_token=int(annotations[containers.ANNOTATION_FENCING_TOKEN]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def state_of(job: Mapping[str, Any] | None) -> State:
    if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
        return State.gone
    for condition in _conditions(job):
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return State.succeeded
        if condition.get("type") == "Failed":
            return State.failed
    return State.active


def failure(job: Mapping[str, Any]) -> str:
    """Why a failed Job failed: its Failed condition's reason and message."""
    for condition in _conditions(job):
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            reason = str(condition.get("reason") or "Failed")
            message = str(condition.get("message") or "").strip()
            return f"{reason}: {message}" if message else reason
    return "Failed"


def _conditions(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = (job.get("status") or {}).get("conditions") or []
    return [c for c in found if isinstance(c, Mapping)]


def termination(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The termination message of the container that ended last (a failed one first),
    as ``container NAME: MESSAGE``; its reason and exit code when it wrote none."""
    best: tuple[bool, str, str, str] | None = None
    for pod in pods:
        status = pod.get("status") or {}
        for item in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            for state_key in ("state", "lastState"):
                ended = ((item.get(state_key) or {}).get("terminated")) or None
                if not ended:
                    continue
                code = int(ended.get("exitCode") or 0)
                text = str(ended.get("message") or "").strip()
                if not text:
                    text = f"{ended.get('reason') or 'Terminated'} (exit code {code})"
                found = (code != 0, str(ended.get("finishedAt") or ""), str(item.get("name")), text)
                if best is None or found[:2] > best[:2]:
                    best = found
    if best is None:
        return None
    return f"container {best[2]}: {best[3]}"


def error_message(name: str, job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> str:
    """A run's error for its failed Job: the Job's reason, and the last container's
    termination message."""
    message = f"Job {name} failed: {failure(job)}"
    ended = termination(pods)
    if ended:
        message += f"; {ended}"
    return message[:_MESSAGE_LIMIT]


def due_text(instant: datetime | None) -> str:
    if instant is None:
        return ""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def build(
    lease: Lease,
    scheduled_job: Mapping[str, Any],
    template: Mapping[str, Any],
    timeout_seconds: int,
    ttl_seconds: int,
) -> dict[str, Any]:
    """The Job of ``lease``'s attempt, from the ScheduledJob's ``template``."""
    name = containers.job_name(lease.job, lease.run_id, lease.attempt)
    ours = {
        containers.LABEL_JOB: containers.label_value(lease.job),
        containers.LABEL_RUN: lease.run_id,
        containers.LABEL_ATTEMPT: str(lease.attempt),
    }
    metadata = template.get("metadata") or {}
    spec = copy.deepcopy(dict(template["spec"]))
    # tickwork owns the retries (and their backoff) and the attempt's time.
    spec["backoffLimit"] = 0
    spec["activeDeadlineSeconds"] = timeout_seconds
    spec.setdefault("ttlSecondsAfterFinished", ttl_seconds)
    pod_template = spec["template"]
    pod_meta = pod_template.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **ours}
    pod = pod_template["spec"]
    pod.setdefault("restartPolicy", "Never")
    env = [
        {"name": containers.ENV_RUN_ID, "value": lease.run_id},
        {"name": containers.ENV_ATTEMPT, "value": str(lease.attempt)},
        {"name": containers.ENV_DUE_AT, "value": due_text(lease.due_at)},
        {"name": containers.ENV_IDEMPOTENCY_KEY, "value": lease.idempotency_key},
        {"name": containers.ENV_FENCING_TOKEN, "value": str(lease.fencing_token)},
    ]
    payload = orjson.dumps(lease.payload).decode()
    mounts: list[dict[str, Any]] = []
    if len(payload.encode()) <= containers.PAYLOAD_ENV_BYTES:
        env.append({"name": containers.ENV_PAYLOAD, "value": payload})
    else:
        # Past what an environment string may hold: a file, from the pod's annotation.
        pod_meta["annotations"] = {
            **(pod_meta.get("annotations") or {}),
            containers.ANNOTATION_PAYLOAD: payload,
        }
        env.append({"name": containers.ENV_PAYLOAD_FILE, "value": containers.PAYLOAD_FILE})
        volumes = [
            v for v in pod.get("volumes") or [] if v.get("name") != containers.PAYLOAD_VOLUME
        ]
        volumes.append(
            {
                "name": containers.PAYLOAD_VOLUME,
                "downwardAPI": {
                    "items": [
                        {
                            "path": "payload.json",
                            "fieldRef": {"fieldPath": _PAYLOAD_FIELD},
                        }
                    ]
                },
            }
        )
        pod["volumes"] = volumes
        mounts.append(
            {
                "name": containers.PAYLOAD_VOLUME,
                "mountPath": containers.PAYLOAD_DIR,
                "readOnly": True,
            }
        )
    for key in ("initContainers", "containers"):
        for container in pod.get(key) or []:
            own = [
                item
                for item in container.get("env") or []
                if not (isinstance(item, Mapping) and item.get("name") in containers.ENV_NAMES)
            ]
            container["env"] = own + copy.deepcopy(env)
            # An image that writes no /dev/termination-log still says why it failed:
            # the kubelet takes the end of its log instead (no pods/log rights needed).
            container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
            if mounts:
                kept = [
                    m
                    for m in container.get("volumeMounts") or []
                    if m.get("name") != containers.PAYLOAD_VOLUME
                ]
                container["volumeMounts"] = kept + copy.deepcopy(mounts)
    sj_meta = scheduled_job.get("metadata") or {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": lease.tenant,
            "labels": {
                **(metadata.get("labels") or {}),
                **ours,
                containers.LABEL_QUEUE: lease.queue,
                containers.LABEL_MANAGED_BY: containers.MANAGED_BY,
            },
            "annotations": {
                **(metadata.get("annotations") or {}),
                containers.ANNOTATION_JOB: lease.job,
                containers.ANNOTATION_FENCING_TOKEN: str(lease.fencing_token),
            },
            # Deleting the ScheduledJob deletes its Jobs (the garbage collector). Not
            # blockOwnerDeletion: that would need rights on the owner's finalizers.
            "ownerReferences": [
                {
                    "apiVersion": SCHEDULED_JOB_API,
                    "kind": SCHEDULED_JOB_KIND,
                    "name": str(sj_meta.get("name")),
                    "uid": str(sj_meta.get("uid")),
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }
