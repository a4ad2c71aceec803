"""Options shared by the role commands."""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from pythonjsonlogger import json as jsonlogger

from tickwork.api import server
from tickwork.api.review_settings import ReviewSettings
from tickwork.api.services import ApiSettings
from tickwork.core import fairness
from tickwork.core.shards import DEFAULT_SHARD_COUNT, ShardMap
from tickwork.engine import quotas
from tickwork.engine.metrics import JobLabels

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


def listen(role: str, host: str, port: int, option: str = "--port") -> socket.socket:
    """The API's listening socket, bound before the role starts anything else; a taken
    port is one line on stderr and exit status 1, not a traceback."""
    try:
        return server.listen(host, port)
    except server.PortInUse:
        message = f"port {port} is in use; pass {option}"
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


LOG_FORMATS = ("text", "json")


def _formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        # One object a line: time, level, logger, message, and every extra the call
        # gave (the stable `action` key, shard, run, ...), which log pipelines index.
        return jsonlogger.JsonFormatter(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            datefmt="%Y-%m-%dT%H:%M:%S%z",
        )
    return _ActionFormatter("%(asctime)s %(levelname)-7s %(name)s%(action_tag)s %(message)s")


def configure_logging(level: str | None = None, log_format: str | None = None) -> None:
    """Log to stderr as ``--log-format``/``--log-level`` (or their environment
    variables) say; a role calls it once at start."""
    given = _given()
    level = level or given.get(LOG_LEVEL_ENV) or os.environ.get(LOG_LEVEL_ENV)
    chosen = log_format or given.get(LOG_FORMAT_ENV) or os.environ.get(LOG_FORMAT_ENV) or "text"
    if chosen not in LOG_FORMATS:
        raise click.UsageError(f"{LOG_FORMAT_ENV} must be one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter(chosen))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or "INFO").upper())
    # The embedded PostgreSQL narrates every pg_ctl call at INFO.
    logging.getLogger("pgserver").setLevel(logging.WARNING)


LOG_FORMAT_ENV = "TICKWORK_LOG_FORMAT"
LOG_LEVEL_ENV = "TICKWORK_LOG_LEVEL"


_LOGGING_META = "tickwork.logging"


def _given() -> dict[str, str]:
    context = click.get_current_context(silent=True)
    found: dict[str, str] = {} if context is None else context.meta.get(_LOGGING_META, {})
    return found


def _export(variable: str) -> Callable[[click.Context, click.Parameter, str | None], None]:
    """An option callback that leaves its value in the click context, where
    ``configure_logging`` reads it: the commands need no parameter for it."""

    def callback(context: click.Context, _parameter: click.Parameter, value: str | None) -> None:
        if value:
            context.meta.setdefault(_LOGGING_META, {})[variable] = value

    return callback


def logging_options(function: F) -> F:
    """``--log-format`` and ``--log-level``: the same on every role."""
    function = click.option(
        "--log-level",
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        envvar=LOG_LEVEL_ENV,
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_export(LOG_LEVEL_ENV),
        help="Log level (default INFO). [env TICKWORK_LOG_LEVEL]",
    )(function)
    return click.option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        envvar=LOG_FORMAT_ENV,
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_export(LOG_FORMAT_ENV),
        help="text (time level logger [action] message) or json (one object a line, with "
        "the stable action key). Default text. [env TICKWORK_LOG_FORMAT]",
    )(function)


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
    """Tenant quotas and priority weights: the same for ``dispatcher`` and ``dev``."""
    function = click.option(
        "--priority-weights",
        envvar="TICKWORK_PRIORITY_WEIGHTS",
        default="70/25/5",
        show_default=True,
        callback=_weights,
        help="Shares of claims for critical/default/bulk when all have ready work; an "
        "idle priority's share goes to the others. [env TICKWORK_PRIORITY_WEIGHTS]",
    )(function)
    function = click.option(
        "--max-pending-runs",
        type=click.IntRange(min=1),
        envvar="TICKWORK_MAX_PENDING_RUNS",
        default=quotas.DEFAULT_MAX_PENDING_RUNS,
        show_default=True,
        help="Runs a tenant may have waiting (scheduled, ready, retry_wait); over it: 429 "
        "quota-exceeded. The tokens file may set maxPendingRuns per tenant. "
        "[env TICKWORK_MAX_PENDING_RUNS]",
    )(function)
    function = click.option(
        "--enqueue-burst",
        type=click.FloatRange(min=1),
        envvar="TICKWORK_ENQUEUE_BURST",
        default=quotas.DEFAULT_ENQUEUE_BURST,
        show_default=True,
        help="Enqueues a tenant may make at once above the rate (enqueueBurst per tenant "
        "in the tokens file). [env TICKWORK_ENQUEUE_BURST]",
    )(function)
    return click.option(
        "--enqueue-rate",
        type=click.FloatRange(min=0, min_open=True),
        envvar="TICKWORK_ENQUEUE_RATE",
        default=quotas.DEFAULT_ENQUEUE_RATE,
        show_default=True,
        help="Enqueues per second per tenant, across every dispatcher (enqueueRate per "
        "tenant in the tokens file); over it: 429 quota-exceeded. [env TICKWORK_ENQUEUE_RATE]",
    )(function)


def _weights(_context: click.Context, _parameter: click.Parameter, value: str) -> Weights:
    try:
        return fairness.parse_weights(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


Weights = tuple[float, float, float]


def api_settings(
    enqueue_rate: float,
    enqueue_burst: float,
    max_pending_runs: int,
    priority_weights: Weights,
    authenticator: object,
) -> ApiSettings:
    """The API settings the quota options give, with the tokens file's per-tenant quotas."""
    return ApiSettings(
        enqueue_rate=enqueue_rate,
        enqueue_burst=enqueue_burst,
        max_pending_runs=max_pending_runs,
        priority_weights=priority_weights,
        quota_overrides=getattr(authenticator, "quota_overrides", {}),
        ui_secret=ui_secret(),
    )


AUTH_METHODS = ("tokens", "kubernetes")


def auth_options(function: F) -> F:
    """How the dispatcher authenticates callers: a tokens file, or Kubernetes."""
    function = click.option(
        "--auth-audience",
        "auth_audiences",
        multiple=True,
        envvar="TICKWORK_AUTH_AUDIENCE",
        help="With --auth kubernetes: an audience the ServiceAccount token must be "
        "issued for (a projected token with this audience cannot be replayed to the API "
        "server). [env TICKWORK_AUTH_AUDIENCE, space-separated]",
    )(function)
    function = click.option(
        "--auth-cache-seconds",
        type=click.FloatRange(min=0),
        envvar="TICKWORK_AUTH_CACHE_SECONDS",
        default=10.0,
        show_default=True,
        help="With --auth kubernetes: seconds a TokenReview or SubjectAccessReview answer "
        "is reused (a refusal: half as long). [env TICKWORK_AUTH_CACHE_SECONDS]",
    )(function)
    return click.option(
        "--auth",
        type=click.Choice(AUTH_METHODS),
        envvar="TICKWORK_AUTH",
        default=None,
        help="tokens: the --tokens file decides. kubernetes: ServiceAccount tokens are "
        "checked with TokenReview and each call authorised with SubjectAccessReview on "
        "the tickwork.dev API group (namespace = tenant). Default: kubernetes in a pod "
        "without --tokens, else tokens. [env TICKWORK_AUTH]",
    )(function)


# Where a pod finds its ServiceAccount token: its presence means "running in a pod".
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def in_pod() -> bool:
    return SERVICE_ACCOUNT_TOKEN.is_file()


def auth_method(auth: str | None, tokens_file: Path | None) -> str:
    if auth is None:
        auth = "kubernetes" if tokens_file is None and in_pod() else "tokens"
    if auth == "tokens" and tokens_file is None:
        raise click.UsageError("give --tokens (or set TICKWORK_TOKENS_FILE), or --auth kubernetes")
    return auth


def review_settings(cache_seconds: float, audiences: tuple[str, ...]) -> ReviewSettings:
    """The Kubernetes review settings the options give."""
    return ReviewSettings(
        cache_seconds=cache_seconds,
        negative_cache_seconds=cache_seconds / 2,
        audiences=tuple(a for given in audiences for a in given.split()),
    )


def metrics_options(function: F) -> F:
    """``--metrics-job``: the jobs with their own per-job series."""
    return click.option(
        "--metrics-job",
        "metrics_jobs",
        multiple=True,
        envvar="TICKWORK_METRICS_JOBS",
        help="A job (tenant/name; shell patterns such as payments/*) with its own series "
        "in the per-job metrics (at most 200 jobs); every other job counts under "
        "tickwork_job=_other. Repeatable. [env TICKWORK_METRICS_JOBS, space-separated]",
    )(function)


def job_labels(metrics_jobs: tuple[str, ...]) -> JobLabels:
    return JobLabels(pattern for given in metrics_jobs for pattern in given.split())
