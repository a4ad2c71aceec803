"""The cluster roles: ``tickwork migrate | scheduler | dispatcher``."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import click

from tickwork.api.app import create_app
from tickwork.api.auth import StaticTokens
from tickwork.api.edge import EdgeLimits
from tickwork.api.server import HttpServer
from tickwork.cli import health, options, runtime
from tickwork.core.errors import SchemaMismatch
from tickwork.engine import canary
from tickwork.engine.metrics import Metrics
from tickwork.engine.observer import ShardObserver
from tickwork.engine.scheduler import Scheduler
from tickwork.store import migrate as migrations
from tickwork.store.database import Database


@click.command()
@options.database_options
@options.logging_options
def migrate(database_urls: tuple[str, ...], shards: int) -> None:
    """Create or upgrade the schema of every shard (safe to run twice)."""
    options.configure_logging()
    shard_map = options.shard_map(database_urls, shards)
    try:
        applied = asyncio.run(migrations.migrate_all(shard_map.shards))
    except SchemaMismatch as error:
        raise click.ClickException(error.detail) from error
    for shard, versions in applied.items():
        state = f"applied {versions}" if versions else "up to date"
        click.echo(f"shard {shard}: {state} (version {migrations.latest_version()})")


@click.command()
@options.database_options
@options.logging_options
@click.option(
    "--interval",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds between passes over each owned shard.",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    envvar="TICKWORK_HEALTH_PORT",
    default=0,
    show_default=True,
    help="Port of /healthz, /readyz (passes are being made) and /metrics; 0: none (the "
    "Helm chart uses 8081). [env TICKWORK_HEALTH_PORT]",
)
@options.metrics_options
def scheduler(
    database_urls: tuple[str, ...],
    shards: int,
    interval: float,
    health_port: int,
    metrics_jobs: tuple[str, ...],
) -> None:
    """Materialise cron runs, flip due runs to ready, reap expired leases, enqueue the
    canary of each shard and report the shards' backlog.

    This replica works on every shard; run one replica until shard ownership
    (Kubernetes Leases) is enabled.
    """
    options.configure_logging()
    shard_map = options.shard_map(database_urls, shards)
    metrics = Metrics(job_labels=options.job_labels(metrics_jobs))
    listener = (
        None
        if health_port == 0
        else options.listen("scheduler", "0.0.0.0", health_port, "--health-port")  # noqa: S104
    )

    async def main() -> None:
        stop = asyncio.Event()
        remove = runtime.stop_on_signals(stop)
        try:
            async with Database(shard_map) as database:
                loop = Scheduler(
                    database, interval=interval, metrics=metrics, observer=ShardObserver(metrics)
                )
                if listener is None:
                    await runtime.run_until_stopped(stop, loop.run)
                    return
                progress = health.Progress(lambda: loop.passes, max(30.0, 10 * interval))
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
@options.database_options
@options.logging_options
@click.option("--host", default="0.0.0.0", show_default=True)  # noqa: S104 - a server role
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--tokens",
    "tokens_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="TICKWORK_TOKENS_FILE",
    help="YAML list of {token, tenant, role, queues}, optionally with the tenant's "
    "enqueueRate, enqueueBurst, maxPendingRuns; with --auth kubernetes it is asked "
    "first. [env TICKWORK_TOKENS_FILE]",
)
@options.auth_options
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    envvar="TICKWORK_MAX_CONNECTIONS",
    default=EdgeLimits.max_connections,
    show_default=True,
    help="Open HTTP connections this process accepts; over it: 503 server-busy. "
    "[env TICKWORK_MAX_CONNECTIONS]",
)
@options.quota_options
@options.metrics_options
def dispatcher(
    database_urls: tuple[str, ...],
    shards: int,
    host: str,
    port: int,
    tokens_file: Path | None,
    auth: str | None,
    auth_cache_seconds: float,
    auth_audiences: tuple[str, ...],
    max_connections: int,
    enqueue_rate: float,
    enqueue_burst: float,
    max_pending_runs: int,
    priority_weights: options.Weights,
    metrics_jobs: tuple[str, ...],
) -> None:
    """Serve the HTTP API and the dashboard at /ui/ (stateless; run as many as needed:
    give them all the same TICKWORK_UI_SECRET so a dashboard session works on each)."""
    options.configure_logging()
    shard_map = options.shard_map(database_urls, shards)
    method = options.auth_method(auth, tokens_file)
    try:
        tokens = None if tokens_file is None else StaticTokens.from_file(tokens_file)
    except ValueError as error:
        raise click.ClickException(str(error)) from error
    reviews = options.review_settings(auth_cache_seconds, auth_audiences)
    listener = options.listen("dispatcher", host, port)

    async def main() -> None:
        stop = asyncio.Event()
        remove = runtime.stop_on_signals(stop)
        try:
            async with (
                Database(shard_map) as database,
                runtime.authenticator(method, tokens, reviews) as authenticator,
            ):
                settings = options.api_settings(
                    enqueue_rate, enqueue_burst, max_pending_runs, priority_weights, tokens
                )
                metrics = Metrics(job_labels=options.job_labels(metrics_jobs))
                services = runtime.api_services(database, authenticator, metrics, settings)
                limits = EdgeLimits(max_connections=max_connections)
                server = HttpServer(create_app(services), host, sock=listener, limits=limits)
                click.echo(f"tickwork API on {await server.start()}")
                # The dispatcher's half of the canary: complete the shards' canary runs.
                worker = f"canary@{socket.gethostname()}:{os.getpid()}"
                await canary.work(services.dispatcher, stop, worker)
                await server.stop()
        finally:
            remove()

    try:
        runtime.run(main())
    finally:
        listener.close()
