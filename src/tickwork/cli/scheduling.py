"""The scheduler's options, as ``tickwork scheduler`` and ``tickwork dev`` take them:
shard ownership (``--coordination``, ``--lease-namespace``, ``--identity``,
``--lease-seconds``) and the health port."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from tickwork.coordination import choice
from tickwork.coordination.coordinator import DEFAULT_LEASE_SECONDS, Timing

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class CoordinationOptions:
    kind: choice.Kind | None
    identity: str | None
    namespace: str | None
    lease_seconds: float

    def timing(self) -> Timing:
        return Timing(lease_seconds=self.lease_seconds)


def coordination_options(function: F) -> F:
    """``--coordination``, ``--lease-namespace``, ``--identity``, ``--lease-seconds``."""
    function = click.option(
        "--lease-seconds",
        type=click.FloatRange(1, 3600),
        envvar="TICKWORK_LEASE_SECONDS",
        default=DEFAULT_LEASE_SECONDS,
        show_default=True,
        help="Duration of the shard and membership leases. A replica renews them every "
        "30 % of it and stops writing to a shard 10 % of it before its lease can have "
        "expired for the others; a dead replica's shards are re-owned within about this "
        "long. [env TICKWORK_LEASE_SECONDS]",
    )(function)
    function = click.option(
        "--identity",
        envvar="TICKWORK_IDENTITY",
        default=None,
        callback=_identity,
        help="This replica's name in the leases; unique per replica. [default: $POD_NAME, "
        "else hostname-pid; env TICKWORK_IDENTITY]",
    )(function)
    function = click.option(
        "--lease-namespace",
        envvar="TICKWORK_LEASE_NAMESPACE",
        default=None,
        help="Namespace of the Lease objects (kubernetes). [default: $POD_NAMESPACE, else "
        "tickwork; env TICKWORK_LEASE_NAMESPACE]",
    )(function)
    return click.option(
        "--coordination",
        type=click.Choice(choice.KINDS),
        envvar="TICKWORK_COORDINATION",
        default=None,
        help="Where shard ownership lives: Kubernetes Leases, or tables in each shard's "
        "PostgreSQL schema. [default: kubernetes in a pod, else postgres; env "
        "TICKWORK_COORDINATION]",
    )(function)


def _identity(_context: click.Context, _parameter: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return choice.check_identity(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


def health_options(function: F) -> F:
    """``--health-host``, ``--health-port``: ``/healthz``, ``/readyz``, ``/metrics``."""
    function = click.option(
        "--health-port",
        type=click.IntRange(-1, 65535),
        envvar="TICKWORK_HEALTH_PORT",
        default=8081,
        show_default=True,
        help="Port of /healthz (alive), /readyz (coordinating; names the shards whose "
        "database is down) and /metrics; 0 picks a free port, -1 serves none. "
        "[env TICKWORK_HEALTH_PORT]",
    )(function)
    return click.option(
        "--health-host",
        envvar="TICKWORK_HEALTH_HOST",
        default="0.0.0.0",  # noqa: S104 - the kubelet probes the pod's address
        show_default=True,
        help="Address the health port listens on. [env TICKWORK_HEALTH_HOST]",
    )(function)
