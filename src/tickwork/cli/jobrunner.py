"""``tickwork job-runner``: run the runs of container jobs as Kubernetes Jobs. Its
options come from ``JobRunnerSettings`` (``jobrunner.settings``)."""

from __future__ import annotations

from typing import Any

import click

from tickwork.cli import options, runtime
from tickwork.coordination.health import HealthServer
from tickwork.core import pod
from tickwork.jobrunner import health as runner_health
from tickwork.jobrunner import metrics as runner_metrics
from tickwork.jobrunner.kube import Kube, KubeError
from tickwork.jobrunner.runner import JobRunner
from tickwork.jobrunner.settings import JobRunnerSettings
from tickwork.worker.client import ApiError, WorkerClient
from tickwork.worker.credentials import Token, TokenFile


@click.command("job-runner")
@options.settings_options(JobRunnerSettings)
def job_runner(**given: Any) -> None:
    """Run container jobs: lease the runs of ScheduledJobs with spec.jobTemplate and run
    each attempt as a Kubernetes Job in the ScheduledJob's namespace, heartbeating while
    it runs and completing the run when it ends.

    It talks to the tickwork API as a worker does (TICKWORK_TOKEN, or a token file such
    as a projected ServiceAccount token) and to the Kubernetes API as its own
    ServiceAccount (or the kubeconfig). SIGTERM stops it and leaves the Jobs running:
    the next runner takes them up.
    """
    settings = options.load(JobRunnerSettings, given)
    options.configure_logging(settings.log)
    if not settings.namespaces:
        here = pod.namespace()
        if not here:
            raise click.UsageError("give --namespace NS (in a pod: $POD_NAMESPACE by default)")
        settings = settings.model_copy(update={"namespaces": (here,)})
    token = _token(settings)

    async def main() -> None:
        with runtime.stop_on_signals() as stop:
            kube = await Kube.connect(settings.kubeconfig)
            client = WorkerClient(
                settings.url,
                token,
                request_timeout=settings.request_timeout,
                user_agent="tickwork-job-runner",
            )
            health: HealthServer | None = None
            try:
                runner = JobRunner(client, kube, settings)
                if settings.health_port is not None:
                    health = health_server(runner, settings.health_bind, settings.health_port)
                    try:
                        await health.start()
                    except OSError as error:
                        where = f"{settings.health_bind}:{settings.health_port}"
                        raise click.ClickException(f"cannot listen on {where}: {error}") from error
                click.echo(
                    f"tickwork job-runner {runner.identity}: queues "
                    f"{', '.join(settings.queues)}, namespaces {', '.join(settings.namespaces)}"
                    + (f"; probes on {health.url}" if health else "")
                )
                await runner.run(stop)
            finally:
                if health is not None:
                    await health.stop()
                await client.close()
                await kube.close()

    try:
        runtime.run(main())
    except KubeError as error:
        raise click.ClickException(str(error)) from error
    except ApiError as error:
        raise click.ClickException(f"the tickwork API refused the lease call: {error}") from error


def _token(settings: JobRunnerSettings) -> Token:
    if settings.token and settings.token_file:
        raise click.UsageError("set one of TICKWORK_TOKEN and --token-file, not both")
    if settings.token_file is not None:
        try:
            return TokenFile(settings.token_file)
        except ValueError as error:
            raise click.UsageError(str(error)) from error
    if not settings.token:
        raise click.UsageError("no token: set TICKWORK_TOKEN or give --token-file")
    return settings.token


def health_server(runner: JobRunner, host: str, port: int) -> HealthServer:
    """The runner's health port: every role's server, with the runner's answers."""
    return HealthServer(
        lambda: runner_health.readiness(runner),
        host,
        port,
        metrics=runner.metrics.render,
        metrics_content_type=runner_metrics.CONTENT_TYPE,
    )
