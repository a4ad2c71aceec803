"""The settings of ``tickwork job-runner`` (the table in ``docs/configuration.md`` is
generated from this model)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator

from tickwork.core import containers, limits, pod
from tickwork.core.settings import LogSettings, Option, Settings
from tickwork.core.spec import check_queue, check_tenant


def default_identity() -> str:
    """``$POD_NAME``, else ``<hostname>-<pid>``."""
    return pod.identity()


class JobRunnerSettings(Settings):
    """``tickwork job-runner``: lease the runs of container jobs (``spec.jobTemplate``)
    and run each attempt as a Kubernetes Job in the ScheduledJob's namespace."""

    url: Annotated[str, Field(min_length=1), Option("--url", env="TICKWORK_URL")]
    """The tickwork API (``http://<release>-tickwork-dispatcher.<namespace>.svc``)."""

    token: Annotated[str | None, Option(env="TICKWORK_TOKEN")] = None
    """The bearer token (a tokens file's worker token); without it ``token_file``."""

    token_file: Annotated[
        Path | None, Option("--token-file", env="TICKWORK_TOKEN_FILE", path="file")
    ] = None
    """A file holding the bearer token, read again as it rotates: in a pod, a projected
    ServiceAccount token for the dispatcher's audience (``tickwork``)."""

    log: LogSettings = LogSettings()
    """Logging."""

    namespaces: Annotated[tuple[str, ...], Option("--namespace")] = ()
    """A namespace whose container jobs it runs (repeatable): where it watches
    ScheduledJobs and creates Jobs. Unset: ``$POD_NAMESPACE``. With a ServiceAccount
    token it leases the runs of its own namespace only (the tenant of its token)."""

    queues: Annotated[tuple[str, ...], Option("--queue")] = (containers.QUEUE,)
    """A queue to lease from (repeatable): ``containers`` or ``containers-<name>``."""

    max_jobs: Annotated[int, Field(ge=1, le=10_000), Option("--max-jobs")] = 100
    """Runs held at once (a Job each, running or finishing); no lease call asks for more."""

    lease_seconds: Annotated[
        float,
        Field(ge=limits.MIN_LEASE_SECONDS, le=limits.MAX_LEASE_SECONDS),
        Option("--lease-seconds"),
    ] = float(limits.DEFAULT_LEASE_SECONDS)
    """The lease asked for; heartbeats come at a third of it while the Job runs. A runner
    that is gone longer loses its runs to the reaper (the attempt fails as
    ``lease-expired``, its Job is deleted by the next runner)."""

    wait_seconds: Annotated[float, Field(ge=0, le=limits.MAX_WAIT_SECONDS)] = 10.0
    """Long-poll of each lease call."""

    job_ttl_seconds: Annotated[int, Field(ge=0), Option("--job-ttl-seconds")] = 86_400
    """``ttlSecondsAfterFinished`` of each Job whose template sets none: how long a
    finished Job (and its pods' logs) stays."""

    identity: Annotated[
        str | None,
        Field(min_length=1, max_length=limits.MAX_WORKER_ID_LENGTH),
        Option("--identity"),
    ] = None
    """This runner's name: the ``workerId`` of its leases, the ``reportingInstance`` of
    its Events. Unset: ``$POD_NAME``, else ``<hostname>-<pid>``."""

    health_port: Annotated[int | None, Field(ge=0, le=65535), Option("--health-port")] = 8081
    """Port of ``/healthz`` (alive), ``/readyz`` (its caches are synced and its last
    lease call went through) and ``/metrics``; 0: any free port (embedded in a program,
    ``None`` serves none)."""

    health_bind: str = "0.0.0.0"  # noqa: S104 - probed by the kubelet
    """Address the health server listens on."""

    kubeconfig: Annotated[
        Path | None, Option("--kubeconfig", env="KUBECONFIG", path="file", exists=True)
    ] = None
    """kubeconfig file; without it ``~/.kube/config``, else the pod's service account."""

    request_timeout: Annotated[float, Field(gt=0)] = 30.0
    """Bound of each call to the tickwork API or the Kubernetes API (a lease call gets
    ``wait_seconds`` more)."""

    retry_base_seconds: Annotated[float, Field(ge=0)] = 0.5
    """While an API is unreachable, calls are retried after a full-jitter backoff from
    this..."""

    retry_max_seconds: Annotated[float, Field(ge=0)] = 30.0
    """...doubling up to this."""

    @field_validator("queues", mode="before")
    @classmethod
    def _runner_queues(cls, value: Any) -> Any:
        value = _each(value, _runner_queue)
        if isinstance(value, list | tuple) and not value:
            raise ValueError(f"give at least one queue (the default is {containers.QUEUE})")
        return value

    @field_validator("namespaces", mode="before")
    @classmethod
    def _tenants(cls, value: Any) -> Any:
        value = _each(value, check_tenant)
        return tuple(sorted(set(value))) if isinstance(value, list | tuple) else value


def _each(value: Any, check: Callable[[str], object]) -> Any:
    """A name or a list of names (an option given once or many times), each checked;
    anything else is left for the field's own validation to refuse."""
    if isinstance(value, str):
        value = (value,)
    if isinstance(value, list | tuple):
        for item in value:
            check(str(item))
    return value


def _runner_queue(queue: str) -> None:
    check_queue(queue)
    if not containers.is_runner_queue(queue):
        raise ValueError(
            f"{queue!r} is a workers' queue: {containers.QUEUE_RULE}, and a "
            "job-runner leases only those"
        )
