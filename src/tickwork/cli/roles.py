"""The cluster roles: ``tickwork migrate | scheduler | dispatcher``.

Each takes its options from its settings model (``core.settings``) and wires the
engine over the shards; none touches the store itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from tickwork.api.app import create_app
from tickwork.api.auth import StaticTokens
from tickwork.api.server import HttpServer
from tickwork.cli import options, runtime
from tickwork.core.errors import SchemaMismatch
from tickwork.core.settings import DispatcherSettings, MigrateSettings, SchedulerSettings
from tickwork.engine import installation
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler


@click.command()
@options.settings_options(MigrateSettings)
def migrate(**given: Any) -> None:
    """Create or upgrade the schema of every shard (safe to run twice)."""
    settings = options.load(MigrateSettings, given)
    options.configure_logging()
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
    """Materialise cron runs, flip due runs to ready and reap expired leases.

    This replica works on every shard; run one replica until shard ownership
    (Kubernetes Leases) is enabled.
    """
    settings = options.load(SchedulerSettings, given)
    options.configure_logging()
    shard_map = options.shard_map_of(settings.database)

    async def main() -> None:
        stop = asyncio.Event()
        remove = runtime.stop_on_signals(stop)
        try:
            async with installation.opened(shard_map, settings.database.pool) as engine:
                loop = Scheduler(
                    engine.database,
                    interval=settings.interval,
                    batch=settings.batch,
                    metrics=Metrics(),
                    retention_days=settings.retention_days,
                    maintenance_interval=settings.maintenance_interval,
                    retry_base_seconds=settings.retry_base_seconds,
                    retry_max_seconds=settings.retry_max_seconds,
                )
                await runtime.run_until_stopped(stop, loop.run)
        finally:
            remove()

    runtime.run(main())


@click.command()
@options.settings_options(DispatcherSettings)
def dispatcher(**given: Any) -> None:
    """Serve the HTTP API and the dashboard at /ui/ (stateless; run as many as needed:
    give them all the same TICKWORK_UI_SECRET so a dashboard session works on each)."""
    settings = options.load(DispatcherSettings, given)
    options.configure_logging()
    shard_map = options.shard_map_of(settings.database)
    try:
        tokens = StaticTokens.from_file(settings.tokens_file)
    except ValueError as error:
        raise click.ClickException(str(error)) from error
    api = options.with_quotas_of(settings.api, tokens)
    listener = options.listen("dispatcher", settings.host, settings.port)

    async def main() -> None:
        stop = asyncio.Event()
        remove = runtime.stop_on_signals(stop)
        try:
            async with installation.opened(
                shard_map, settings.database.pool, priority_weights=api.priority_weights
            ) as engine:
                services = runtime.api_services(engine, tokens, Metrics(), api)
                server = HttpServer(
                    create_app(services), settings.host, sock=listener, limits=settings.edge
                )
                click.echo(f"tickwork API on {await server.start()}")
                await stop.wait()
                await server.stop()
        finally:
            remove()

    try:
        runtime.run(main())
    finally:
        listener.close()
