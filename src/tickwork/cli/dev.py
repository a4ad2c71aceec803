"""``tickwork dev``: every role in one process on an embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import functools
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
from tickwork.api.tokens_file import TokensFile
from tickwork.cli import options, runtime, scheduling
from tickwork.cli.demo import DemoWorker
from tickwork.coordination import choice
from tickwork.core.errors import SchemaMismatch
from tickwork.core.settings import DevSettings, SchedulerSettings
from tickwork.core.shards import ShardMap
from tickwork.engine import canary, installation
from tickwork.engine.jobs import EnqueueRequest
from tickwork.engine.manifest_sync import ManifestSync
from tickwork.engine.metrics import Metrics

logger = logging.getLogger("tickwork.dev")

ADMIN_TOKEN_FILE: Final = "admin-token"  # noqa: S105 - a file name, not a secret
HOST: Final = "127.0.0.1"
CANARY: Final = f"canary@dev:{os.getpid()}"

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
class _Run:
    """One ``tickwork dev``: its settings and what was made of them at start."""

    settings: DevSettings
    shard_map: ShardMap
    listener: socket.socket
    tokens: Authenticator
    admin_token: str | None
    admin_token_file: Path | None


@click.command()
@options.settings_options(DevSettings)
def dev(**given: Any) -> None:
    """Every role in one process: for a laptop, a demo or a test."""
    settings = options.load(DevSettings, given)
    options.configure_logging(settings.log)
    # Before anything starts: a taken port is the most common way this fails.
    listener = options.listen("dev", HOST, settings.port)
    try:
        _dev(listener, settings)
    finally:
        listener.close()  # a no-op once the HTTP server has taken it


def _dev(listener: socket.socket, settings: DevSettings) -> None:
    tokens: Authenticator
    admin_token = token_file = None
    data_dir = settings.data_dir
    kept_file = data_dir / ADMIN_TOKEN_FILE
    kept = _read_token(kept_file)
    if settings.tokens_file is not None:
        try:
            tokens = TokensFile(settings.tokens_file)
        except ValueError as error:
            raise click.ClickException(str(error)) from error
    else:
        token_file = kept_file
        admin_token = kept
    server = None
    database_urls = settings.database_urls
    if not database_urls:
        if not (data_dir / "PG_VERSION").exists():
            # initdb wants an empty folder: a token kept while --database-url was in use
            # (with or without a tokens file now) is put back once PostgreSQL has made
            # its data dir.
            kept_file.unlink(missing_ok=True)
        click.echo(f"starting embedded PostgreSQL in {data_dir} ...")
        server = _embedded_postgres(data_dir)
        database_urls = (server.get_uri(),)
        if kept is not None and token_file is None:
            _keep_token(kept_file, kept)
    try:
        if token_file is not None:
            admin_token = admin_token or generate_token()
            _keep_token(token_file, admin_token)
            tokens = StaticTokens(
                [TokenEntry(token=admin_token, tenant="default", role=Role.admin, name="dev-admin")]
            )
        run = _Run(
            settings=settings,
            shard_map=options.shard_map(database_urls, settings.shards),
            listener=listener,
            tokens=tokens,
            admin_token=admin_token,
            admin_token_file=token_file,
        )
        try:
            runtime.run(_run(run))
        except SchemaMismatch as error:
            raise click.ClickException(error.detail) from error
    finally:
        if server is not None:
            server.cleanup()
    click.echo("tickwork dev stopped.")


async def _run(run: _Run) -> None:
    settings = run.settings
    with runtime.stop_on_signals() as stop:
        await installation.migrate(run.shard_map)
        api = options.with_quotas_of(settings.api, run.tokens)
        metrics = Metrics()
        async with (
            installation.opened(
                run.shard_map,
                priority_weights=api.priority_weights,
                queue_rates=api.queue_rates(),
                queue_held_back=lambda queue: metrics.queue_rate_limited.labels(queue).inc(),
            ) as engine,
            choice.coordinator(engine.database, kind="postgres") as coordinator,
        ):
            jobs = engine.jobs
            loops: list[Loop] = []
            sync = None
            if settings.manifest_dir is not None:
                sync = ManifestSync(jobs, settings.manifest_dir)
                await sync.sync()
                loops.append(sync.watch)
            demos = DemoWorker.plan(sync.known.values() if sync else ())
            authenticator = run.tokens
            if settings.demo_worker:
                # The demo workers' own tokens, next to the admin token or the file's.
                demo_tokens = StaticTokens(demo.token for demo in demos)
                authenticator = FirstMatch([run.tokens, demo_tokens])
            else:
                demos = []
            services = runtime.api_services(engine, authenticator, metrics, api)
            http = http_server.HttpServer(create_app(services), HOST, sock=run.listener)
            url = await http.start()
            # The dispatcher's half of the canary the scheduler enqueues, as a dispatcher
            # runs it.
            loops.append(functools.partial(canary.work, engine.dispatcher, worker_id=CANARY))
            _banner(url, run, len(sync.known) if sync else 0)
            loops += [_demo_loop(demo, url) for demo in demos]
            if settings.demo_worker:
                for demo in demos:
                    queues = ", ".join(demo.queues)
                    click.echo(f"demo worker for tenant {demo.tenant} (queues {queues})")
                if sync is not None:
                    for tenant, name in sorted(sync.known):
                        await jobs.enqueue(tenant, name, EnqueueRequest(), "dev-demo")
                    click.echo(f"enqueued one run of each of the {len(sync.known)} jobs")
            reloaded = run.tokens if isinstance(run.tokens, TokensFile) else None
            try:
                # Shards shared through the postgres backend: several dev processes (or
                # schedulers) on one --database-url split them, and take over each
                # other's. The scheduler production runs, with its default settings.
                async with (
                    runtime.reloading(reloaded, engine, metrics),
                    scheduling.scheduler_role(
                        engine, SchedulerSettings(), ownership=coordinator, metrics=metrics
                    ) as scheduler,
                ):
                    await runtime.run_until_stopped(stop, *loops, *scheduler.loops)
            finally:
                click.echo("stopping ...")
                await http.stop()


def _demo_loop(demo: DemoWorker, url: str) -> Loop:
    worker = demo.build(url)

    async def run_worker(stop: asyncio.Event) -> None:
        task = asyncio.create_task(worker.run())
        await stop.wait()
        worker.stop()
        await task

    return run_worker


def _banner(url: str, run: _Run, jobs: int) -> None:
    settings = run.settings
    lines = [
        "",
        "tickwork dev is running (Ctrl-C stops everything)",
        f"  API        {url}",
        f"  dashboard  {url}/ui/  (sign in with a token)",
        f"  metrics    {url}/metrics",
    ]
    if run.admin_token is not None:
        lines.append(f"  token      {run.admin_token}")
        lines.append(f"             (admin; kept in {run.admin_token_file})")
    if settings.tokens_file is not None:
        lines.append(f"  tokens     {settings.tokens_file}")
    if settings.manifest_dir is not None:
        lines.append(f"  manifests  {settings.manifest_dir} ({jobs} jobs, reloaded on change)")
    if run.admin_token is not None:
        lines += [
            "",
            f"  export TICKWORK_URL={url} TICKWORK_TOKEN={run.admin_token}",
            "  tickwork jobs list",
        ]
    click.echo("\n".join(lines) + "\n")
