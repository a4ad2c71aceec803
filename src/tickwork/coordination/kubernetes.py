"""The ``kubernetes`` coordination backend: ``coordination.k8s.io/v1`` Leases.

One Lease per shard, ``tickwork-shard-{n}``, and one per replica,
``tickwork-member-{identity}`` (label ``tickwork.dev/role: scheduler``), all in the
lease namespace and labelled ``app.kubernetes.io/managed-by: tickwork``, with the
fields the built-in leader election uses: ``holderIdentity``, ``leaseDurationSeconds``,
``acquireTime``, ``renewTime``, ``leaseTransitions``.

Taking and renewing are a replace with the ``resourceVersion`` last read (the API
server's optimistic concurrency): a 409 means another replica wrote the Lease first,
and it won. A Lease expires ``leaseDurationSeconds`` after its ``renewTime`` on the
reader's clock; the holder stops writing a margin earlier (``coordinator.Timing``), which
is the clock skew between replicas this tolerates.

The client is ``kubernetes_asyncio`` (the asyncio build of the official client, as the
operator uses). Its own leader election elects one leader per Lease and cannot balance
shards between replicas, so the coordinator does that over plain Lease calls.
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tickwork.coordination import kubeconfig as kubeconfig_module
from tickwork.coordination.backend import (
    MEMBER_LEASE_PREFIX,
    SHARD_LEASE_PREFIX,
    LeaseState,
    Observation,
    shard_lease_name,
)
from tickwork.core.clock import Clock, DatabaseClock

MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "tickwork"}
ROLE_LABEL: Final = "tickwork.dev/role"
MEMBER_LABELS: Final = {**MANAGED_BY, ROLE_LABEL: "scheduler"}
SELECTOR: Final = "app.kubernetes.io/managed-by=tickwork"
SERVICE_ACCOUNT_TOKEN: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
_NAME_PART: Final = re.compile(r"[^a-z0-9.-]+")
_MAX_NAME: Final = 253


# The Kubernetes API configuration could not be loaded.
KubernetesUnavailable = kubeconfig_module.KubeconfigError


def in_cluster() -> bool:
    """Running in a pod: the service account's token is mounted."""
    return SERVICE_ACCOUNT_TOKEN.exists()


def member_lease_name(identity: str) -> str:
    """``tickwork-member-{identity}``, made a valid object name (lower case, letters,
    digits, '-' and '.'); an identity that had to be changed gets a hash of the
    original, so two identities never share a Lease."""
    part = _NAME_PART.sub("-", identity.lower()).strip("-.")
    if part != identity or len(MEMBER_LEASE_PREFIX) + len(part) > _MAX_NAME:
        digest = hashlib.blake2b(identity.encode(), digest_size=4).hexdigest()
        room = _MAX_NAME - len(MEMBER_LEASE_PREFIX) - len(digest) - 1
        part = f"{part[:room].strip('-.')}-{digest}".strip("-")
    return f"{MEMBER_LEASE_PREFIX}{part}"


def micro_time(instant: datetime) -> str:
    """A ``MicroTime`` as the API server writes it (six fractional digits, UTC)."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubernetesLeases:
    name = "kubernetes"

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        shard_count: int,
        *,
        clock: Clock | None = None,
        request_seconds: float = 5.0,
        owns_api: bool = False,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.shard_count = shard_count
        self.clock = clock or DatabaseClock()
        self.request_seconds = request_seconds
        self._owns_api = owns_api
        self._leases = client.CoordinationV1Api(api)
        # The Lease objects last read or written, by name: their resourceVersion is
        # what the next replace is conditional on.
        self._seen: dict[str, Any] = {}

    @classmethod
    async def connect(
        cls,
        namespace: str,
        shard_count: int,
        *,
        kubeconfig: str | None = None,
        request_seconds: float = 5.0,
    ) -> KubernetesLeases:
        configuration = await kubeconfig_module.load_configuration(kubeconfig)
        return cls(
            client.ApiClient(configuration),
            namespace,
            shard_count,
            request_seconds=request_seconds,
            owns_api=True,
        )

    def _now(self) -> datetime:
        return self.clock.now() or datetime.now(UTC)

    # --- the seam ---

    async def observe(self, identity: str, lease_seconds: float) -> Observation:
        await self._write(
            member_lease_name(identity), identity, lease_seconds, MEMBER_LABELS, take=True
        )
        return await self._listed(self.shard_count)

    async def inspect(self) -> Observation:
        """Every shard Lease (whatever its number) and the live members, read only:
        nobody is announced (what ``tickwork reshard`` checks before it starts)."""
        return await self._listed(None)

    async def _listed(self, shard_count: int | None) -> Observation:
        listed = await self._leases.list_namespaced_lease(
            self.namespace, label_selector=SELECTOR, _request_timeout=self.request_seconds
        )
        now = self._now()
        leases: dict[int, LeaseState] = {}
        members: set[str] = set()
        for item in listed.items:
            name = item.metadata.name
            self._seen[name] = item
            holder, remaining = _holding(item, now)
            if name.startswith(SHARD_LEASE_PREFIX):
                number = name.removeprefix(SHARD_LEASE_PREFIX)
                if number.isdigit() and (shard_count is None or int(number) < shard_count):
                    shard = int(number)
                    transitions = item.spec.lease_transitions or 0
                    leases[shard] = LeaseState(shard, holder, remaining, transitions)
            elif (
                (item.metadata.labels or {}).get(ROLE_LABEL) == "scheduler"
                and holder is not None
                and remaining is not None
                and remaining > 0
            ):
                members.add(holder)
        return Observation(leases, frozenset(members))

    async def hold(self, shard: int, identity: str, lease_seconds: float) -> bool:
        # The round's observe() has just read every shard Lease: no read first.
        return await self._write(
            shard_lease_name(shard), identity, lease_seconds, MANAGED_BY, take=False
        )

    async def release(self, shard: int, identity: str) -> None:
        await self.release_named(shard_lease_name(shard), identity)

    # --- any one Lease (the operator's leader election holds one) ---

    async def hold_named(
        self,
        name: str,
        identity: str,
        lease_seconds: float,
        labels: dict[str, str] = MANAGED_BY,
    ) -> bool:
        """Take the Lease ``name`` for ``identity`` if it is free, expired or already its
        own (renewing it); False while another holder's is running, or when another
        replica won the race. Read first unless this replica holds it, so a contender
        sees a release at its next try."""
        seen = self._seen.get(name)
        if seen is None or (seen.spec.holder_identity or None) != identity:
            await self._read(name)
        return await self._write(name, identity, lease_seconds, labels, take=False)

    async def release_named(
        self, name: str, identity: str, labels: dict[str, str] = MANAGED_BY
    ) -> None:
        """Free the Lease ``name`` if ``identity`` holds it."""
        for _ in range(2):
            current = self._seen.get(name) or await self._read(name)
            if current is None or (current.spec.holder_identity or None) != identity:
                return
            spec = current.spec
            body = self._body(
                name,
                current,
                holder=None,
                duration=spec.lease_duration_seconds or 1,
                acquired=spec.acquire_time,
                renewed=self._now(),
                transitions=spec.lease_transitions or 0,
                labels=labels,
            )
            try:
                self._seen[name] = await self._leases.replace_namespaced_lease(
                    name, self.namespace, body, _request_timeout=self.request_seconds
                )
                return
            except ApiException as error:
                if error.status not in (404, 409):
                    raise
                self._seen.pop(name, None)

    async def leave(self, identity: str) -> None:
        name = member_lease_name(identity)
        try:
            await self._leases.delete_namespaced_lease(
                name, self.namespace, _request_timeout=self.request_seconds
            )
        except ApiException as error:
            if error.status != 404:
                raise
        self._seen.pop(name, None)

    async def close(self) -> None:
        if self._owns_api:
            await self.api.close()

    # --- Lease calls ---

    async def _read(self, name: str) -> Any:
        try:
            found = await self._leases.read_namespaced_lease(
                name, self.namespace, _request_timeout=self.request_seconds
            )
        except ApiException as error:
            if error.status == 404:
                self._seen.pop(name, None)
                return None
            raise
        self._seen[name] = found
        return found

    async def _write(
        self,
        name: str,
        identity: str,
        lease_seconds: float,
        labels: dict[str, str],
        *,
        take: bool,
    ) -> bool:
        """Create or replace the Lease ``name`` with ``identity`` as holder, renewed
        now, unless another holder's Lease is running (``take``: regardless, for the
        replica's own membership Lease). One retry after a 409 or 404 with a fresh
        read; a 409 on that one means another replica won."""
        duration = max(1, math.ceil(lease_seconds))
        for attempt in (1, 2):
            now = self._now()
            current = self._seen.get(name)
            if current is None:
                body = self._body(
                    name,
                    None,
                    holder=identity,
                    duration=duration,
                    acquired=now,
                    renewed=now,
                    transitions=0,
                    labels=labels,
                )
                try:
                    self._seen[name] = await self._leases.create_namespaced_lease(
                        self.namespace, body, _request_timeout=self.request_seconds
                    )
                    return True
                except ApiException as error:
                    if error.status != 409 or attempt == 2:
                        raise
                    await self._read(name)  # created meanwhile: look at it
                    continue
            spec = current.spec
            holder, remaining = _holding(current, now)
            running = remaining is not None and remaining > 0
            if not take and holder not in (None, identity) and running:
                return False
            mine = holder == identity
            body = self._body(
                name,
                current,
                holder=identity,
                duration=duration,
                acquired=spec.acquire_time if mine and spec.acquire_time else now,
                renewed=now,
                transitions=(spec.lease_transitions or 0) + (0 if mine else 1),
                labels=labels,
            )
            try:
                self._seen[name] = await self._leases.replace_namespaced_lease(
                    name, self.namespace, body, _request_timeout=self.request_seconds
                )
                return True
            except ApiException as error:
                if error.status not in (404, 409):
                    raise
                fresh = await self._read(name)
                if attempt == 2:
                    return False
                if (
                    error.status == 409
                    and not take
                    and fresh is not None
                    and (fresh.spec.holder_identity or None) != identity
                ):
                    return False  # another replica wrote it first: it won
        return False

    def _body(
        self,
        name: str,
        current: Any,
        *,
        holder: str | None,
        duration: int,
        acquired: datetime | None,
        renewed: datetime,
        transitions: int,
        labels: dict[str, str],
    ) -> Any:
        """A Lease body as a plain document rather than a ``V1Lease``: the client
        writes datetimes with ``isoformat()``, which drops the fraction of a whole
        second, and the API server refuses a ``MicroTime`` without its six digits."""
        metadata: dict[str, Any] = {"name": name, "namespace": self.namespace}
        if current is not None:
            metadata["resourceVersion"] = current.metadata.resource_version
            metadata["labels"] = {**(current.metadata.labels or {}), **labels}
            if current.metadata.annotations:
                metadata["annotations"] = current.metadata.annotations
        else:
            metadata["labels"] = dict(labels)
        spec: dict[str, Any] = {
            "leaseDurationSeconds": duration,
            "renewTime": micro_time(renewed),
            "leaseTransitions": transitions,
        }
        if holder is not None:
            spec["holderIdentity"] = holder
        if acquired is not None:
            spec["acquireTime"] = micro_time(acquired)
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }


def _holding(lease: Any, now: datetime) -> tuple[str | None, float | None]:
    """The holder of a Lease object and the seconds until it expires on ``now``'s
    clock (None: free)."""
    spec = lease.spec
    holder = (spec.holder_identity or None) if spec is not None else None
    if holder is None or spec.renew_time is None:
        return None, None
    renewed = spec.renew_time
    if renewed.tzinfo is None:
        renewed = renewed.replace(tzinfo=UTC)
    expires = renewed + timedelta(seconds=spec.lease_duration_seconds or 0)
    return holder, (expires - now).total_seconds()
