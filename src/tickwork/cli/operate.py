"""``tickwork operator``: reconcile ScheduledJob objects into the store, keep their
status and Events current, and serve the admission webhook."""

from __future__ import annotations

import asyncio
import importlib.util
import logging

import click

from tickwork.cli import options, runtime
from tickwork.core.errors import SchemaMismatch
from tickwork.engine.jobs import Jobs
from tickwork.operator import health, refresh
from tickwork.operator.cluster import Cluster, ClusterError
from tickwork.operator.runtime import Operator, OperatorSettings, WebhookSettings
from tickwork.store import migrate, outages
from tickwork.store.database import Database

logger = logging.getLogger("tickwork.operator")


@click.command()
@options.database_options
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    help="Serve ScheduledJobs of this namespace (repeatable).",
)
@click.option("--all-namespaces", is_flag=True, help="Serve ScheduledJobs of every namespace.")
@click.option(
    "--webhook-port",
    type=click.IntRange(0, 65535),
    default=9443,
    show_default=True,
    help="Port of the admission webhook; 0 turns the webhook off.",
)
@click.option(
    "--webhook-bind",
    default="0.0.0.0",  # noqa: S104 - the API server connects from outside the pod
    show_default=True,
    help="Address the webhook listens on.",
)
@click.option(
    "--webhook-host",
    default=None,
    help="Host name the API server reaches the webhook at, written into a managed "
    "clientConfig.url (default: the bind address).",
)
@click.option(
    "--webhook-insecure",
    is_flag=True,
    help="Serve the webhook over plain HTTP (development and tests only).",
)
@click.option(
    "--no-webhook-manage",
    is_flag=True,
    help="Do not create or update the ValidatingWebhookConfiguration (the Helm chart "
    "keeps it, with clientConfig.service and caBundle).",
)
@click.option(
    "--webhook-cert",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="PEM certificate of the webhook (with --webhook-key); without both a "
    "self-signed one is made.",
)
@click.option(
    "--webhook-key",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="PEM private key of --webhook-cert.",
)
@click.option(
    "--status-interval",
    type=click.FloatRange(min=0.1),
    default=refresh.DEFAULT_INTERVAL,
    show_default=True,
    help="Seconds between status passes (run-derived status of the jobs that changed).",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    default=health.DEFAULT_PORT,
    show_default=True,
    help="Port of /healthz (alive) and /readyz (watching, store reachable).",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="kubeconfig file; without it ~/.kube/config, else the pod's service account. "
    "[env KUBECONFIG]",
)
def operator(
    database_urls: tuple[str, ...],
    shards: int,
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    webhook_port: int,
    webhook_bind: str,
    webhook_host: str | None,
    webhook_insecure: bool,
    no_webhook_manage: bool,
    webhook_cert: str | None,
    webhook_key: str | None,
    status_interval: float,
    health_port: int,
    kubeconfig: str | None,
) -> None:
    """Reconcile ScheduledJob objects: definitions, status, Events, admission."""
    options.configure_logging()
    # Kopf narrates every handler call at INFO; its warnings and errors stay, but for
    # the admission refusals it logs as errors: a refused object is not the operator's
    # failure (the handler logs each refusal at INFO).
    logging.getLogger("kopf").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(_refusals_are_not_errors)
    shard_map = options.shard_map(database_urls, shards)
    if all_namespaces == bool(namespaces):
        raise click.UsageError("give --namespace NS (repeatable) or --all-namespaces")
    if (webhook_cert is None) != (webhook_key is None):
        raise click.UsageError("--webhook-cert and --webhook-key go together")
    webhook = None
    if webhook_port != 0:
        self_signed = webhook_cert is None and not webhook_insecure
        if self_signed and importlib.util.find_spec("certbuilder") is None:
            raise click.UsageError(
                "the webhook needs a certificate: give --webhook-cert/--webhook-key, "
                "pip install certbuilder for a self-signed one, --webhook-insecure "
                "(development only) or --webhook-port 0"
            )
        webhook = WebhookSettings(
            port=webhook_port,
            bind=webhook_bind,
            host=webhook_host,
            insecure=webhook_insecure,
            cert_file=webhook_cert,
            key_file=webhook_key,
            manage=not no_webhook_manage,
        )
    settings = OperatorSettings(
        namespaces=tuple(sorted(set(namespaces))),
        webhook=webhook,
        status_interval=status_interval,
        health_port=health_port,
    )

    async def main() -> None:
        stop = asyncio.Event()
        remove = runtime.stop_on_signals(stop)
        try:
            async with Database(shard_map) as database:
                await _check_shards(database)
                cluster = await Cluster.connect(kubeconfig)
                try:
                    await Operator(Jobs(database), cluster, settings).run(stop)
                finally:
                    await cluster.close()
        finally:
            remove()

    try:
        runtime.run(main())
    except (ClusterError, SchemaMismatch) as error:
        message = error.detail if isinstance(error, SchemaMismatch) else str(error)
        raise click.ClickException(message) from error


async def _check_shards(database: Database) -> None:
    """Refuse to start on shards of another schema version; a shard that is down is
    only logged (objects show StoreUnavailable until it is back)."""
    shard_map = database.shard_map
    for number in range(shard_map.count):
        try:
            async with database.connection(number) as conn:
                await migrate.check_shard(conn, shard_map[number], shard_map.count)
        except SchemaMismatch:
            raise
        except Exception as error:
            if not outages.is_outage(error):
                raise
            logger.warning(
                "shard %d unavailable at start: %s",
                number,
                outages.describe(error),
                extra={"action": "operator-store-unavailable", "shard": number},
            )


def _refusals_are_not_errors(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (message.startswith("Webhook ") and " failed permanently: " in message)
