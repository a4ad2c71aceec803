"""The cluster roles: ``tickwork migrate | scheduler | dispatcher``.

Each takes its options from its settings model (``core.settings``) and wires the
engine over the shards; none touches the store itself.
"""

from __future__ import annotations

import asyncio
import os
import socket
from datetime import timedelta
from typing import Any, Final

import click

from tickwork.api.app import create_app
from tickwork.api.auth import StaticTokens
from tickwork.api.server import HttpServer
from tickwork.cli import health, options, runtime
from tickwork.core.errors import SchemaMismatch
from tickwork.core.settings import DispatcherSettings, MigrateSettings, SchedulerSettings
from tickwork.engine import canary, installation
from tickwork.engine.metrics import Metrics
from tickwork.engine.observer import ShardObserver
from tickwork.engine.scheduler import Scheduler

ALL: Final = "0.0.0.0"  # noqa: S104 - the health port is probed by the kubelet


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
    """Materialise cron runs, flip due runs to ready, reap expired leases, enqueue the
    canary of each shard and report the shards' backlog.

    This replica works on every shard; run one replica until shard ownership
    (Kubernetes Leases) is enabled.
    """
    settings = options.load(SchedulerSettings, given)
    options.configure_logging(settings.log)
    shard_map = options.shard_map_of(settings.database)
    metrics = Metrics(job_labels=options.job_labels(settings.metrics))
    port = settings.health_port
    # Bound before anything starts: a taken port is one line and exit status 1.
    listener = None if port == 0 else options.listen("scheduler", ALL, port, "--health-port")

    async def main() -> None:
        stop = asyncio.Event()
        remove = runtime.stop_on_signals(stop)
        try:
            async with installation.opened(shard_map, settings.database.pool) as engine:
                loop = Scheduler(
                    engine.database,
                    interval=settings.interval,
                    batch=settings.batch,
                    metrics=metrics,
                    retention_days=settings.retention_days,
                    maintenance_interval=settings.maintenance_interval,
                    retry_base_seconds=settings.retry_base_seconds,
                    retry_max_seconds=settings.retry_max_seconds,
                    observer=ShardObserver(
                        metrics, interval=timedelta(seconds=settings.observe_interval)
                    ),
                )
                if listener is None:
                    await runtime.run_until_stopped(stop, loop.run)
                    return
                progress = health.Progress(lambda: loop.passes, max(30.0, 10 * settings.interval))
                async with health.serving(listener, metrics, progress):
                    await runtime.run_until_stopped(stop, loop.run)
        finally:
            remove()

    try:
        runtime.run(main())
    finally:
        if listener is not None:
            listener.close()


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
        tokens = (
            None if settings.tokens_file is None else StaticTokens.from_file(settings.tokens_file)
        )
    except ValueError as error:
        raise click.ClickException(str(error)) from error
    api = options.with_quotas_of(settings.api, tokens)
    reviews = options.review_settings(settings.kubernetes)
    metrics = Metrics(job_labels=options.job_labels(settings.metrics))
    listener = options.listen("dispatcher", settings.host, settings.port)

    async def main() -> None:
        stop = asyncio.Event()
        remove = runtime.stop_on_signals(stop)
        try:
            async with (
                installation.opened(
                    shard_map, settings.database.pool, priority_weights=api.priority_weights
                ) as engine,
                runtime.authenticator(method, tokens, reviews) as authenticator,
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
        finally:
            remove()

    try:
        runtime.run(main())
    finally:
        listener.close()
