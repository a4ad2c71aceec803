"""Which backend a replica coordinates through, and under which name: the defaults of
the contract, and the coordinator opened on the chosen backend.

Defaults: ``kubernetes`` when running in a pod (a service-account token is mounted),
else ``postgres``; identity ``$POD_NAME``, else ``hostname-pid``; lease namespace
``$POD_NAMESPACE``, else ``tickwork``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Final, Literal, TypeAlias

from tickwork.coordination import kubernetes
from tickwork.coordination.backend import Backend
from tickwork.coordination.coordinator import Coordinator, Timing
from tickwork.coordination.postgres import PostgresLeases
from tickwork.core import pod
from tickwork.store.database import Database

Kind: TypeAlias = Literal["kubernetes", "postgres"]
KINDS: Final[tuple[Kind, ...]] = ("kubernetes", "postgres")
DEFAULT_NAMESPACE: Final = "tickwork"
MAX_IDENTITY: Final = 200


class Unavailable(Exception):
    """The chosen backend cannot be reached or configured (no kubeconfig, say)."""


def default_kind() -> Kind:
    return "kubernetes" if kubernetes.in_cluster() else "postgres"


def default_identity() -> str:
    return pod.identity()


def default_namespace() -> str:
    return pod.namespace() or DEFAULT_NAMESPACE


def check_identity(identity: str) -> str:
    """An identity is printable text of 1..200 characters (it names a Lease)."""
    if not identity.strip() or len(identity) > MAX_IDENTITY or not identity.isprintable():
        raise ValueError(f"must be printable text of 1..{MAX_IDENTITY} characters")
    return identity


@contextlib.asynccontextmanager
async def coordinator(
    database: Database,
    *,
    kind: Kind | None = None,
    identity: str | None = None,
    namespace: str | None = None,
    timing: Timing | None = None,
) -> AsyncIterator[Coordinator]:
    """The coordinator of this replica on the chosen backend (its client closed
    afterwards); ``None`` means the contract's default."""
    timing = timing or Timing()
    timing.check()
    kind = kind or default_kind()
    identity = check_identity(identity or default_identity())
    backend: Backend
    # Each call to the backend is given most of the coordinator's bound on it, so the
    # backend's own timeout, not the coordinator's cancellation, ends a slow call.
    call_seconds = timing.call * 0.8
    if kind == "kubernetes":
        try:
            backend = await kubernetes.KubernetesLeases.connect(
                namespace or default_namespace(),
                database.shard_count,
                request_seconds=call_seconds,
            )
        except kubernetes.KubernetesUnavailable as error:
            raise Unavailable(str(error)) from error
    else:
        backend = PostgresLeases(
            database,
            shard_seconds=call_seconds,
            observe_seconds=min(call_seconds, max(0.5, timing.renew / 2)),
        )
    try:
        yield Coordinator(backend, identity, database.shard_count, timing)
    finally:
        await backend.close()
