"""``tickwork operator``: reconcile ScheduledJob objects into the store, keep their
status and Events current, and serve the admission webhook. Its options come from
``OperatorSettings`` (``core.settings``)."""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import click

from tickwork.cli import options, runtime
from tickwork.coordination import choice
from tickwork.core.settings import OperatorSettings
from tickwork.engine import installation
from tickwork.operator import leadership
from tickwork.operator.cluster import Cluster, ClusterError
from tickwork.operator.runtime import Operator

logger = logging.getLogger("tickwork.operator")

START_CHECK_SECONDS = 5.0


@click.command()
@options.settings_options(OperatorSettings)
def operator(**given: Any) -> None:
    """Reconcile ScheduledJob objects: definitions, status, Events, admission."""
    settings = options.load(OperatorSettings, given)
    options.configure_logging(settings.log)
    # Kopf narrates every handler call at INFO; its warnings and errors stay, but for
    # the admission refusals it logs as errors: a refused object is not the operator's
    # failure (the handler logs each refusal at INFO).
    logging.getLogger("kopf").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(_refusals_are_not_errors)
    shard_map = options.shard_map_of(settings.database)
    if settings.all_namespaces == bool(settings.namespaces):
        raise click.UsageError("give --namespace NS (repeatable) or --all-namespaces")
    if settings.all_namespaces:
        settings = settings.model_copy(update={"namespaces": ()})
    else:
        settings = settings.model_copy(
            update={"namespaces": tuple(sorted(set(settings.namespaces)))}
        )
    webhook = settings.webhook
    if (webhook.cert_file is None) != (webhook.key_file is None):
        raise click.UsageError("--webhook-cert and --webhook-key go together")
    self_signed = webhook.cert_file is None and not webhook.insecure
    if webhook.enabled and self_signed and importlib.util.find_spec("certbuilder") is None:
        raise click.UsageError(
            "the webhook needs a certificate: give --webhook-cert/--webhook-key, "
            "pip install certbuilder for a self-signed one, --webhook-insecure "
            "(development only) or --webhook-port 0"
        )
    kubeconfig = None if settings.kubeconfig is None else str(settings.kubeconfig)
    electing = leadership.enabled(settings.election)
    if electing and settings.election.identity is not None:
        try:
            choice.check_identity(settings.election.identity)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--identity") from error

    async def main() -> None:
        with runtime.stop_on_signals() as stop:
            async with installation.opened(shard_map, settings.database.pool) as engine:
                await _check_shards(engine)
                cluster = await Cluster.connect(kubeconfig)
                try:
                    election = leadership.election(cluster, settings.election) if electing else None
                    await Operator(engine.jobs, cluster, settings, election=election).run(stop)
                finally:
                    await cluster.close()

    try:
        runtime.run(main())
    except ClusterError as error:
        raise click.ClickException(str(error)) from error


async def _check_shards(engine: installation.Installation) -> None:
    """Refuse to start on a shard this release will not serve until someone acts (it
    holds another shard, a reshard is half done, its schema is newer than this code runs
    against); a shard that is down or that a migration has not reached yet is only
    logged (its objects show StoreUnavailable until it serves)."""
    found = await engine.readiness(START_CHECK_SECONDS)
    for number, problem in zip(found.down, found.details, strict=True):
        if number in found.mismatched:
            raise click.ClickException(problem)
        logger.warning(
            "shard %d unavailable at start: %s",
            number,
            problem,
            extra={"action": "operator-store-unavailable", "shard": number},
        )


def _refusals_are_not_errors(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (message.startswith("Webhook ") and " failed permanently: " in message)
