"""The role commands' options, made from their settings models (``core.settings``).

``settings_options(Model)`` adds one click option per field that carries an
``Option`` (nested groups included): its flag and environment variable, its type and
bounds, its default, and its docstring as the help. The command then gets the
validated settings object from ``load(Model, options)``; variables that stand for no
flag (secrets) are read from the environment there. Nothing about an option is
written twice.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import annotated_types
import click
import pydantic
from pydantic.fields import FieldInfo
from pythonjsonlogger import json as jsonlogger

from tickwork.api import server
from tickwork.api.review_settings import ReviewSettings
from tickwork.core.settings import (
    ApiSettings,
    DatabaseSettings,
    DispatcherSettings,
    KubernetesAuthSettings,
    LogSettings,
    MetricsSettings,
    Setting,
    Settings,
    settings_of,
)
from tickwork.core.shards import ShardMap
from tickwork.engine.metrics import JobLabels

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", bound=Settings)


def plain(text: str) -> str:
    """A docstring as one line of help: literals unquoted, lines joined."""
    return " ".join(re.sub(r"``([^`]+)``", r"\1", text).split())


def shown(value: Any) -> str:
    """A default as the command line and the docs write it."""
    if isinstance(value, tuple):
        return "/".join(f"{item:g}" if isinstance(item, float) else str(item) for item in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _bounds(field: FieldInfo) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            found["min"] = item.ge
        elif isinstance(item, annotated_types.Gt):
            found["min"], found["min_open"] = item.gt, True
        elif isinstance(item, annotated_types.Le):
            found["max"] = item.le
        elif isinstance(item, annotated_types.Lt):
            found["max"], found["max_open"] = item.lt, True
    return found


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        kept = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(kept) == 1:
            return kept[0]
    return annotation


def _click_option(setting: Setting) -> Callable[[F], F]:
    option = setting.option
    assert option is not None and option.flag is not None
    kind = _without_none(setting.annotation)
    arguments: dict[str, Any] = {"required": setting.required}
    if kind is bool:
        arguments["is_flag"] = True
    elif get_origin(kind) is tuple and get_args(kind)[-1] is Ellipsis:
        arguments["multiple"] = True
    elif get_origin(kind) is tuple:
        arguments["type"] = str  # "70/25/5": the model's validator reads it
    elif get_origin(kind) is Literal:
        arguments["type"] = click.Choice([str(choice) for choice in get_args(kind)])
    elif kind is int:
        arguments["type"] = click.IntRange(**_bounds(setting.field))
    elif kind is float:
        arguments["type"] = click.FloatRange(**_bounds(setting.field))
    elif kind is Path:
        arguments["type"] = click.Path(
            exists=option.exists,
            file_okay=option.path != "dir",
            dir_okay=option.path != "file",
            path_type=Path,
        )
    if not setting.required:
        default = setting.default
        if isinstance(default, tuple) and default and "multiple" not in arguments:
            default = shown(default)
        arguments["default"] = default
        arguments["show_default"] = default not in (None, (), False)
    text = plain(setting.description)
    if option.env is not None:
        arguments["envvar"] = option.env
        text += f" [env {option.env}]"
    return click.option(option.flag, setting.parameter, help=text, **arguments)


def settings_options(model: type[Settings]) -> Callable[[F], F]:
    """Decorator: the options of every flag ``model`` names (see the module docstring)."""
    flagged = [s for s in settings_of(model) if s.option is not None and s.option.flag]

    def decorate(function: F) -> F:
        for setting in reversed(flagged):  # click lists options in decoration order
            function = _click_option(setting)(function)
        return function

    return decorate


def load(model: type[S], given: dict[str, Any]) -> S:
    """The settings the command's options (``given``) and the environment say."""
    document: dict[str, Any] = {}
    by_name: dict[str, Setting] = {}
    for setting in settings_of(model):
        by_name[setting.name] = setting
        option = setting.option
        if setting.parameter in given:
            value = given[setting.parameter]
        elif option is not None and option.flag is None and option.env is not None:
            value = os.environ.get(option.env, "").strip() or None
            if value is None:
                continue
        else:
            continue
        target = document
        for part in setting.path[:-1]:
            target = target.setdefault(part, {})
        target[setting.path[-1]] = value
    try:
        return model.model_validate(document)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        name = ".".join(str(part) for part in first["loc"])
        culprit = by_name.get(name)
        option = None if culprit is None else culprit.option
        where = name if option is None else (option.flag or option.env or name)
        raise click.UsageError(f"{where}: {first['msg']}") from error


def with_quotas_of(settings: ApiSettings, authenticator: object) -> ApiSettings:
    """``settings`` with the per-tenant quotas the tokens file gives (if it gives any)."""
    overrides = getattr(authenticator, "quota_overrides", None)
    if not overrides:
        return settings
    return settings.model_copy(update={"quota_overrides": overrides})


def shard_map_of(database: DatabaseSettings) -> ShardMap:
    return shard_map(database.database_urls, database.shards)


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


def configure_logging(log: LogSettings | None = None) -> None:
    """Log to stderr as the role's ``--log-format`` and ``--log-level`` say."""
    log = log or LogSettings()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter(log.format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(log.level)
    # The embedded PostgreSQL narrates every pg_ctl call at INFO.
    logging.getLogger("pgserver").setLevel(logging.WARNING)


# Where a pod finds its ServiceAccount token: its presence means "running in a pod".
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def in_pod() -> bool:
    return SERVICE_ACCOUNT_TOKEN.is_file()


def auth_method(settings: DispatcherSettings) -> str:
    """``--auth``, or its default: kubernetes in a pod without a tokens file."""
    auth = settings.auth
    if auth is None:
        auth = "kubernetes" if settings.tokens_file is None and in_pod() else "tokens"
    if auth == "tokens" and settings.tokens_file is None:
        raise click.UsageError("give --tokens (or set TICKWORK_TOKENS_FILE), or --auth kubernetes")
    return auth


def review_settings(settings: KubernetesAuthSettings) -> ReviewSettings:
    """What Kubernetes-native authentication is told."""
    return ReviewSettings(
        cache_seconds=settings.cache_seconds,
        negative_cache_seconds=settings.cache_seconds / 2,
        cache_size=settings.cache_size,
        timeout_seconds=settings.timeout_seconds,
        audiences=tuple(a for given in settings.audiences for a in given.split()),
    )


def job_labels(settings: MetricsSettings) -> JobLabels:
    patterns = (pattern for given in settings.jobs for pattern in given.split())
    return JobLabels(patterns, limit=settings.job_limit)
