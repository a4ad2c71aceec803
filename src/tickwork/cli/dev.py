"""``tickwork dev``: every role in one process on an embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click

from tickwork.api.app import create_app
from tickwork.api.auth import Authenticator, Role, StaticTokens, TokenEntry, generate_token
from tickwork.api.server import HttpServer
from tickwork.api.services import ApiSettings
from tickwork.cli import options, runtime
from tickwork.core.shards import ShardMap
from tickwork.engine import manifests
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.metrics import Metrics
from tickwork.engine.scheduler import Scheduler
from tickwork.store import migrate
from tickwork.store.database import Database

logger = logging.getLogger("tickwork.dev")

MANIFEST_ACTOR = "manifests"


class ManifestSync:
    """Keeps the jobs declared in a folder of ScheduledJob YAML in the database.

    A job whose manifest disappears is deleted (its pending runs cancelled, history
    kept); a file that fails to parse leaves the jobs it declared as they were.
    """

    def __init__(self, jobs: Jobs, folder: Path) -> None:
        self.jobs = jobs
        self.folder = folder
        self.known: dict[tuple[str, str], manifests.ScheduledJob] = {}

    async def sync(self) -> None:
        found, errors = manifests.load_folder(self.folder)
        for error in errors:
            logger.error("manifest refused: %s", error, extra={"action": "manifest-error"})
        wanted = {(job.tenant, job.name): job for job in found}
        if errors:  # keep what a broken file declared until it is fixed
            for key, job in self.known.items():
                wanted.setdefault(key, job)
        for key, job in wanted.items():
            if self.known.get(key) == job:
                continue
            _, created = await self.jobs.put(job.tenant, job.name, job.spec, MANIFEST_ACTOR)
            logger.info(
                "%s job %s/%s from %s",
                "created" if created else "updated",
                job.tenant,
                job.name,
                job.source,
                extra={"action": "manifest-apply"},
            )
        for key in set(self.known) - set(wanted):
            with contextlib.suppress(Exception):
                await self.jobs.delete(key[0], key[1], MANIFEST_ACTOR)
            logger.info(
                "deleted job %s/%s (manifest removed)", *key, extra={"action": "manifest-delete"}
            )
        self.known = wanted

    async def watch(self, stop: asyncio.Event) -> None:
        from watchfiles import awatch

        async for _changes in awatch(self.folder, stop_event=stop, debounce=300):
            await self.sync()

    @property
    def queues(self) -> list[str]:
        return sorted({job.spec.queue for job in self.known.values()} | {"default"})


def _embedded_postgres(data_dir: Path) -> Any:
    with warnings.catch_warnings():
        # platformdirs warns about XDG_RUNTIME_DIR on import; irrelevant here.
        warnings.simplefilter("ignore")
        from pgserver import postgres_server

    data_dir.mkdir(parents=True, exist_ok=True)
    return postgres_server.get_server(data_dir, cleanup_mode="stop")


@click.command()
@click.option("--port", type=int, default=8080, show_default=True, help="API port on 127.0.0.1.")
@click.option("--shards", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".tickwork/dev"),
    show_default=True,
    help="Where the embedded PostgreSQL keeps its data.",
)
@click.option(
    "--database-url",
    default=None,
    envvar="TICKWORK_DATABASE_URL",
    help="Use this PostgreSQL instead of the embedded one.",
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
    default=None,
    help="Tokens file; without it an admin token is generated and printed.",
)
@click.option(
    "--demo-worker",
    is_flag=True,
    help="Also run the demo worker for the example jobs, and enqueue one run of each at start.",
)
@options.quota_options
def dev(
    port: int,
    shards: int,
    data_dir: Path,
    database_url: str | None,
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
    server = None
    if database_url is None:
        click.echo(f"starting embedded PostgreSQL in {data_dir} ...")
        server = _embedded_postgres(data_dir)
        database_url = server.get_uri()
    admin_token = None
    authenticator: Authenticator
    if tokens_file is not None:
        try:
            authenticator = StaticTokens.from_file(tokens_file)
        except ValueError as error:
            raise click.ClickException(str(error)) from error
    else:
        admin_token = generate_token()
        authenticator = StaticTokens(
            [TokenEntry(token=admin_token, tenant="default", role=Role.admin, name="dev-admin")]
        )
    assert database_url is not None
    try:
        runtime.run(
            _run(
                ShardMap.from_dsns([database_url], shards),
                authenticator,
                options.api_settings(
                    enqueue_rate, enqueue_burst, max_pending_runs, priority_weights, authenticator
                ),
                admin_token,
                port,
                manifest_dir,
                demo_worker,
            )
        )
    finally:
        if server is not None:
            server.cleanup()
    click.echo("tickwork dev stopped.")


async def _run(
    shard_map: ShardMap,
    authenticator: Authenticator,
    settings: ApiSettings,
    admin_token: str | None,
    port: int,
    manifest_dir: Path | None,
    demo_worker: bool,
) -> None:
    stop = asyncio.Event()
    remove = runtime.stop_on_signals(stop)
    try:
        await migrate.migrate_all(shard_map.shards)
        async with Database(shard_map) as database:
            metrics = Metrics()
            services = runtime.api_services(database, authenticator, metrics, settings)
            http = HttpServer(create_app(services), "127.0.0.1", port)
            url = await http.start()
            scheduler = Scheduler(database, metrics=metrics)
            loops: list[Callable[[asyncio.Event], Coroutine[Any, Any, None]]] = [scheduler.run]
            sync = None
            if manifest_dir is not None:
                sync = ManifestSync(services.jobs, manifest_dir)
                await sync.sync()
                loops.append(sync.watch)
            _banner(url, admin_token, manifest_dir, len(sync.known) if sync else 0)
            if demo_worker:
                if admin_token is None:
                    raise click.UsageError(
                        "--demo-worker needs the generated admin token (omit --tokens)"
                    )
                loops.append(await _demo(services.jobs, url, admin_token, sync))
            try:
                await runtime.run_until_stopped(stop, *loops)
            finally:
                click.echo("stopping ...")
                await http.stop()
    finally:
        remove()


async def _demo(
    jobs: Jobs, url: str, token: str, sync: ManifestSync | None
) -> Callable[[asyncio.Event], Coroutine[Any, Any, None]]:
    from tickwork.cli import demo

    worker = demo.build_worker(url, token, sync.queues if sync else ["default"])
    if sync is not None:
        for tenant, name in sorted(sync.known):
            await jobs.enqueue(tenant, name, EnqueueRequest(), "dev-demo")
        click.echo(f"enqueued one run of each of the {len(sync.known)} example jobs")

    async def run_worker(stop: asyncio.Event) -> None:
        task = asyncio.create_task(worker.run())
        await stop.wait()
        worker.stop()
        await task

    return run_worker


def _banner(url: str, token: str | None, manifest_dir: Path | None, jobs: int) -> None:
    lines = [
        "",
        "tickwork dev is running (Ctrl-C stops everything)",
        f"  API      {url}",
        f"  metrics  {url}/metrics",
    ]
    if token is not None:
        lines += [
            f"  token    {token}   (admin, generated for this run)",
            "",
            f"  export TICKWORK_URL={url} TICKWORK_TOKEN={token}",
            "  tickwork jobs list",
        ]
    if manifest_dir is not None:
        lines.append(f"  manifests {manifest_dir} ({jobs} jobs, reloaded on change)")
    click.echo("\n".join(lines) + "\n")
