"""Options shared by the role commands."""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from tickwork.api import server
from tickwork.core.shards import DEFAULT_SHARD_COUNT, ShardMap

F = TypeVar("F", bound=Callable[..., Any])


def database_options(function: F) -> F:
    function = click.option(
        "--shards",
        type=click.IntRange(1, 4096),
        envvar="TICKWORK_SHARDS",
        default=DEFAULT_SHARD_COUNT,
        show_default=True,
        help="Number of shards S (fixed at install time). [env TICKWORK_SHARDS]",
    )(function)
    return click.option(
        "--database-url",
        "database_urls",
        multiple=True,
        envvar="TICKWORK_DATABASE_URL",
        help="PostgreSQL URL: once for all shards (a schema each), or once per shard in "
        "shard order. [env TICKWORK_DATABASE_URL, space-separated]",
    )(function)


def shard_map(database_urls: tuple[str, ...], shards: int) -> ShardMap:
    urls = [u for url in database_urls for u in url.split()]
    if not urls:
        raise click.UsageError("give --database-url (or set TICKWORK_DATABASE_URL)")
    try:
        return ShardMap.from_dsns(urls, shards if len(urls) == 1 else None)
    except ValueError as error:
        raise click.UsageError(str(error)) from error


def listen(role: str, host: str, port: int) -> socket.socket:
    """The API's listening socket, bound before the role starts anything else; a taken
    port is one line on stderr and exit status 1, not a traceback."""
    try:
        return server.listen(host, port)
    except server.PortInUse:
        message = f"port {port} is in use; pass --port"
    except server.CannotListen as error:
        message = str(error)
    click.echo(f"tickwork {role}: {message}", err=True)
    raise click.exceptions.Exit(1)


class _ActionFormatter(logging.Formatter):
    """``time level logger [action] message``: the action key names the state or step."""

    def format(self, record: logging.LogRecord) -> str:
        action = getattr(record, "action", None)
        record.action_tag = f" [{action}]" if action else ""
        return super().format(record)


def configure_logging(level: str | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _ActionFormatter("%(asctime)s %(levelname)-7s %(name)s%(action_tag)s %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or os.environ.get("TICKWORK_LOG_LEVEL") or "INFO").upper())
    # The embedded PostgreSQL narrates every pg_ctl call at INFO.
    logging.getLogger("pgserver").setLevel(logging.WARNING)


UI_SECRET_ENV = "TICKWORK_UI_SECRET"  # noqa: S105 - the name of a variable


def ui_secret() -> str | None:
    """The secret that seals dashboard sessions, from the environment (never a flag: a
    command line is visible to every user of the machine). Without it each process
    draws its own, and a session lasts as long as the process that signed it."""
    secret = os.environ.get(UI_SECRET_ENV, "").strip()
    if secret and len(secret) < 32:
        raise click.UsageError(f"{UI_SECRET_ENV} must be at least 32 characters")
    return secret or None


def quota_options(function: F) -> F:
    function = click.option(
        "--enqueue-burst",
        type=click.FloatRange(min=1),
        envvar="TICKWORK_ENQUEUE_BURST",
        default=5000.0,
        show_default=True,
        help="Enqueues a tenant may make at once above the rate. [env TICKWORK_ENQUEUE_BURST]",
    )(function)
    return click.option(
        "--enqueue-rate",
        type=click.FloatRange(min=0, min_open=True),
        envvar="TICKWORK_ENQUEUE_RATE",
        default=1000.0,
        show_default=True,
        help="Enqueues per second per tenant per API process; over it: 429 quota-exceeded. "
        "[env TICKWORK_ENQUEUE_RATE]",
    )(function)
