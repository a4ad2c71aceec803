"""The cluster roles: ``tickwork migrate | scheduler | dispatcher``.

Each takes its options from its settings model (``core.settings``) and wires the
engine over the shards; none touches the store itself.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import click

from tickwork.api.app import create_app
from tickwork.api.server import BadCertificate, HttpServer, check_tls
from tickwork.api.tokens_file import TokensFile
from tickwork.cli import options, runtime, scheduling
from tickwork.cli.probes import Probes
from tickwork.coordination import choice
from tickwork.coordination.coordinator import Timing
from tickwork.core.errors import SchemaMismatch
from tickwork.core.settings import DispatcherSettings, MigrateSettings, SchedulerSettings
from tickwork.engine import canary, installation
from tickwork.engine.metrics import Metrics


@click.command()
@options.settings_options(MigrateSettings)
def migrate(**given: Any) -> None:
    """Create or upgrade the schema of every shard (safe to run twice)."""
    settings = options.load(MigrateSettings, given)
    options.configure_logging(settings.log)
    shard_map = options.shard_map_of(settings.database)
    try:
        applied = asyncio.run(installation.migrate(shard_map))
    except SchemaMismatch as error:
        raise click.ClickException(error.detail) from error
    for shard, versions in applied.items():
        state = f"applied {versions}" if versions else "up to date"
        click.echo(f"shard {shard}: {state} (version {installation.schema_version()})")


@click.command()
@options.settings_options(SchedulerSettings)
def scheduler(**given: Any) -> None:
    """Materialise cron runs, flip due runs to ready, reap expired leases, enqueue
    each shard's canary and report its backlog, on the shards this replica owns.

    Run as many replicas as you like: they share the shards through leases (one per
    shard), each aiming at ceil(shards / live replicas), and a dead replica's shards
    are taken over within about --lease-seconds. SIGTERM finishes the transaction in
    flight and releases the leases, so the next owner need not wait them out.
    """
    settings = options.load(SchedulerSettings, given)
    options.configure_logging(settings.log)
    shard_map = options.shard_map_of(settings.database)
    owning = settings.coordination
    metrics = Metrics(job_labels=options.job_labels(settings.metrics))

    async def main() -> None:
        with runtime.stop_on_signals() as stop:
            async with (
                installation.opened(shard_map, settings.database.pool) as engine,
                choice.coordinator(
                    engine.database,
                    kind=owning.backend,
                    identity=owning.identity,
                    namespace=owning.lease_namespace,
                    timing=Timing(lease_seconds=owning.lease_seconds),
                ) as coordinator,
            ):
                role = scheduling.scheduler_role(
                    engine, settings, ownership=coordinator, metrics=metrics
                )
                async with role as scheduler:
                    probes = None
                    if settings.health_port >= 0:
                        probes = Probes(
                            scheduler.scheduler,
                            coordinator,
                            settings.health_host,
                            settings.health_port,
                        )
                        try:
                            await probes.start()
                        except OSError as error:
                            where = f"{settings.health_host}:{settings.health_port}"
                            raise click.ClickException(
                                f"cannot listen on {where}: {error}"
                            ) from error
                    click.echo(
                        f"tickwork scheduler {coordinator.identity}: {shard_map.count} shards, "
                        f"{coordinator.backend.name} coordination, leases of "
                        f"{owning.lease_seconds:g}s"
                        + (f"; probes on {probes.url}" if probes else "")
                    )
                    try:
                        await runtime.run_until_stopped(stop, *scheduler.loops)
                    finally:
                        if probes is not None:
                            await probes.stop()

    try:
        runtime.run(main())
    except choice.Unavailable as error:
        raise click.ClickException(str(error)) from error


@click.command()
@options.settings_options(DispatcherSettings)
def dispatcher(**given: Any) -> None:
    """Serve the HTTP API and the dashboard at /ui/ (stateless; run as many as needed:
    give them all the same TICKWORK_UI_SECRET so a dashboard session works on each)."""
    settings = options.load(DispatcherSettings, given)
    options.configure_logging(settings.log)
    shard_map = options.shard_map_of(settings.database)
    method = options.auth_method(settings)
    try:
        tokens = None if settings.tokens_file is None else TokensFile(settings.tokens_file)
    except ValueError as error:
        raise click.ClickException(str(error)) from error
    api = options.with_quotas_of(settings.api, tokens)
    reviews = options.review_settings(settings.kubernetes)
    metrics = Metrics(job_labels=options.job_labels(settings.metrics))
    try:
        check_tls(settings.edge)
    except BadCertificate as error:
        raise click.ClickException(str(error)) from error
    listener = options.listen("dispatcher", settings.host, settings.port)

    async def main() -> None:
        with runtime.stop_on_signals() as stop:
            async with (
                installation.opened(
                    shard_map,
                    settings.database.pool,
                    priority_weights=api.priority_weights,
                    queue_rates=api.queue_rates(),
                    queue_held_back=lambda queue: metrics.queue_rate_limited.labels(queue).inc(),
                ) as engine,
                runtime.authenticator(method, tokens, reviews) as authenticator,
                runtime.reloading(tokens, engine, metrics),
            ):
                services = runtime.api_services(engine, authenticator, metrics, api)
                server = HttpServer(
                    create_app(services), settings.host, sock=listener, limits=settings.edge
                )
                click.echo(f"tickwork API on {await server.start()}")
                # The dispatcher's half of the canary: complete the shards' canary runs.
                worker = f"canary@{socket.gethostname()}:{os.getpid()}"
                await canary.work(engine.dispatcher, stop, worker, settings.canary_interval)
                await server.stop()

    try:
        runtime.run(main())
    finally:
        listener.close()
