"""``tickwork dev``: every role in one process on an embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click

from tickwork.api import server as http_server
from tickwork.api.app import create_app
from tickwork.api.auth import (
    Authenticator,
    FirstMatch,
    Role,
    StaticTokens,
    TokenEntry,
    generate_token,
)
from tickwork.api.services import ApiSettings
from tickwork.cli import options, runtime
from tickwork.cli.demo import DemoWorker
from tickwork.core.errors import SchemaMismatch
from tickwork.core.shards import ShardMap
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.manifest_sync import ManifestSync
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.store import migrate
from tickwork.store.database import Database

logger = logging.getLogger("tickwork.dev")

ADMIN_TOKEN_FILE: Final = "admin-token"  # noqa: S105 - a file name, not a secret
HOST: Final = "127.0.0.1"

Loop = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


def _embedded_postgres(data_dir: Path) -> Any:
    with warnings.catch_warnings():
        # platformdirs warns about XDG_RUNTIME_DIR on import; irrelevant here.
        warnings.simplefilter("ignore")
        from pgserver import postgres_server

    data_dir.mkdir(parents=True, exist_ok=True)
    return postgres_server.get_server(data_dir, cleanup_mode="stop")


def _read_token(path: Path) -> str | None:
    try:
        token = path.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token if len(token) >= 16 and token.isprintable() and " " not in token else None


def _keep_token(path: Path, token: str) -> None:
    """Write the admin token readable by its owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as file:
        os.fchmod(file.fileno(), 0o600)  # an older file may have had other bits
        file.write(token + "\n")


@dataclass(frozen=True)
class _Quotas:
    """The quota options, the same as ``tickwork dispatcher``'s."""

    enqueue_rate: float
    enqueue_burst: float
    max_pending_runs: int
    priority_weights: options.Weights


@dataclass(frozen=True)
class _Settings:
    shard_map: ShardMap
    listener: socket.socket
    tokens: Authenticator
    admin_token: str | None
    admin_token_file: Path | None
    tokens_file: Path | None
    manifest_dir: Path | None
    demo_worker: bool
    api: ApiSettings


@click.command()
@options.logging_options
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="API port."
)
@click.option(
    "--shards",
    type=click.IntRange(1, 64),
    default=4,
    envvar="TICKWORK_SHARDS",
    show_default=True,
    help="Number of shards (fixed when the data dir is first migrated). [env TICKWORK_SHARDS]",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".tickwork/dev"),
    show_default=True,
    help="Where the embedded PostgreSQL keeps its data, and the generated admin token.",
)
@click.option(
    "--database-url",
    "database_urls",
    multiple=True,
    envvar="TICKWORK_DATABASE_URL",
    help="Use this PostgreSQL instead of the embedded one: once for all shards, or once "
    "per shard. [env TICKWORK_DATABASE_URL, space-separated]",
)
@click.option(
    "--manifests",
    "manifest_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder of ScheduledJob YAML (reloaded on change).",
)
@click.option(
    "--tokens",
    "tokens_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="TICKWORK_TOKENS_FILE",
    default=None,
    help="Tokens file; without it an admin token is generated once and kept in the data "
    "dir. [env TICKWORK_TOKENS_FILE]",
)
@click.option(
    "--demo-worker",
    is_flag=True,
    help="Also run the demo worker for the example jobs (with a worker token of its own), "
    "and enqueue one run of each job at start.",
)
@options.quota_options
def dev(
    port: int,
    shards: int,
    data_dir: Path,
    database_urls: tuple[str, ...],
    manifest_dir: Path | None,
    tokens_file: Path | None,
    demo_worker: bool,
    enqueue_rate: float,
    enqueue_burst: float,
    max_pending_runs: int,
    priority_weights: options.Weights,
) -> None:
    """Every role in one process: for a laptop, a demo or a test."""
    options.configure_logging()
    # Before anything starts: a taken port is the most common way this fails.
    listener = options.listen("dev", HOST, port)
    quotas = _Quotas(enqueue_rate, enqueue_burst, max_pending_runs, priority_weights)
    try:
        _dev(
            listener,
            shards,
            data_dir,
            database_urls,
            manifest_dir,
            tokens_file,
            demo_worker,
            quotas,
        )
    finally:
        listener.close()  # a no-op once the HTTP server has taken it


def _dev(
    listener: socket.socket,
    shards: int,
    data_dir: Path,
    database_urls: tuple[str, ...],
    manifest_dir: Path | None,
    tokens_file: Path | None,
    demo_worker: bool,
    quotas: _Quotas,
) -> None:
    tokens: Authenticator
    admin_token = token_file = None
    if tokens_file is not None:
        try:
            tokens = StaticTokens.from_file(tokens_file)
        except ValueError as error:
            raise click.ClickException(str(error)) from error
    else:
        token_file = data_dir / ADMIN_TOKEN_FILE
        admin_token = _read_token(token_file)
    server = None
    if not database_urls:
        if token_file is not None and not (data_dir / "PG_VERSION").exists():
            # initdb wants an empty folder: a token kept while --database-url was in use
            # is put back once PostgreSQL has made its data dir.
            token_file.unlink(missing_ok=True)
        click.echo(f"starting embedded PostgreSQL in {data_dir} ...")
        server = _embedded_postgres(data_dir)
        database_urls = (server.get_uri(),)
    try:
        if token_file is not None:
            admin_token = admin_token or generate_token()
            _keep_token(token_file, admin_token)
            tokens = StaticTokens(
                [TokenEntry(token=admin_token, tenant="default", role=Role.admin, name="dev-admin")]
            )
        settings = _Settings(
            shard_map=options.shard_map(database_urls, shards),
            listener=listener,
            tokens=tokens,
            admin_token=admin_token,
            admin_token_file=token_file,
            tokens_file=tokens_file,
            manifest_dir=manifest_dir,
            demo_worker=demo_worker,
            api=options.api_settings(
                quotas.enqueue_rate,
                quotas.enqueue_burst,
                quotas.max_pending_runs,
                quotas.priority_weights,
                tokens,
            ),
        )
        try:
            runtime.run(_run(settings))
        except SchemaMismatch as error:
            raise click.ClickException(error.detail) from error
    finally:
        if server is not None:
            server.cleanup()
    click.echo("tickwork dev stopped.")


async def _run(settings: _Settings) -> None:
    stop = asyncio.Event()
    remove = runtime.stop_on_signals(stop)
    try:
        await migrate.migrate_all(settings.shard_map.shards)
        async with Database(settings.shard_map) as database:
            jobs = Jobs(database)
            loops: list[Loop] = []
            sync = None
            if settings.manifest_dir is not None:
                sync = ManifestSync(jobs, settings.manifest_dir)
                await sync.sync()
                loops.append(sync.watch)
            demos = DemoWorker.plan(sync.known.values() if sync else ())
            authenticator = settings.tokens
            if settings.demo_worker:
                # The demo workers' own tokens, next to the admin token or the file's.
                demo_tokens = StaticTokens(demo.token for demo in demos)
                authenticator = FirstMatch([settings.tokens, demo_tokens])
            else:
                demos = []
            metrics = Metrics()
            services = runtime.api_services(database, authenticator, metrics, settings.api)
            http = http_server.HttpServer(create_app(services), HOST, sock=settings.listener)
            url = await http.start()
            loops.append(Scheduler(database, metrics=metrics).run)
            _banner(url, settings, len(sync.known) if sync else 0)
            loops += [_demo_loop(demo, url) for demo in demos]
            if settings.demo_worker:
                for demo in demos:
                    queues = ", ".join(demo.queues)
                    click.echo(f"demo worker for tenant {demo.tenant} (queues {queues})")
                if sync is not None:
                    for tenant, name in sorted(sync.known):
                        await jobs.enqueue(tenant, name, EnqueueRequest(), "dev-demo")
                    click.echo(f"enqueued one run of each of the {len(sync.known)} jobs")
            try:
                await runtime.run_until_stopped(stop, *loops)
            finally:
                click.echo("stopping ...")
                await http.stop()
    finally:
        remove()


def _demo_loop(demo: DemoWorker, url: str) -> Loop:
    worker = demo.build(url)

    async def run_worker(stop: asyncio.Event) -> None:
        task = asyncio.create_task(worker.run())
        await stop.wait()
        worker.stop()
        await task

    return run_worker


def _banner(url: str, settings: _Settings, jobs: int) -> None:
    lines = [
        "",
        "tickwork dev is running (Ctrl-C stops everything)",
        f"  API        {url}",
        f"  dashboard  {url}/ui/  (sign in with a token)",
        f"  metrics    {url}/metrics",
    ]
    if settings.admin_token is not None:
        lines.append(f"  token      {settings.admin_token}")
        lines.append(f"             (admin; kept in {settings.admin_token_file})")
    if settings.tokens_file is not None:
        lines.append(f"  tokens     {settings.tokens_file}")
    if settings.manifest_dir is not None:
        lines.append(f"  manifests  {settings.manifest_dir} ({jobs} jobs, reloaded on change)")
    if settings.admin_token is not None:
        lines += [
            "",
            f"  export TICKWORK_URL={url} TICKWORK_TOKEN={settings.admin_token}",
            "  tickwork jobs list",
        ]
    click.echo("\n".join(lines) + "\n")
