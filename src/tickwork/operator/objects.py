"""The ScheduledJob objects the operator serves, as last seen.

Seeded by the listing at start, then kept current by every watch event Kopf receives
and by the operator's own writes, so the status pass compares what it wants with what
each object holds without reading a single object from the API server.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tickwork.engine import manifests

Key = tuple[str, str]  # (namespace, name)
_KOPF = "kopf"


@dataclass(frozen=True, slots=True)
class Seen:
    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    deleting: bool
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def reference(self) -> dict[str, str]:
        """An ``involvedObject`` for Events."""
        return {
            "apiVersion": manifests.GROUP_VERSION,
            "kind": manifests.KIND,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Seen:
        meta = body.get("metadata") or {}
        status = body.get("status")
        if isinstance(status, Mapping):
            # Kopf's bookkeeping holds a copy of the spec (payload included): not kept.
            status = {k: v for k, v in status.items() if k != _KOPF}
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            generation=int(meta.get("generation") or 0),
            resource_version=str(meta.get("resourceVersion") or ""),
            deleting=meta.get("deletionTimestamp") is not None,
            status=dict(status) if isinstance(status, Mapping) else {},
        )


def _newer(candidate: str, held: str) -> bool:
    """Whether ``candidate`` may replace ``held``. Resource versions are opaque to
    clients, but when both are numbers (etcd revisions) an older event arriving after
    our own write is not allowed to undo it."""
    if candidate.isdigit() and held.isdigit():
        return int(candidate) >= int(held)
    return True


class ObjectCache:
    def __init__(self) -> None:
        self._objects: dict[Key, Seen] = {}

    def __len__(self) -> int:
        return len(self._objects)

    def __iter__(self) -> Iterator[Seen]:
        return iter(list(self._objects.values()))

    def get(self, key: Key) -> Seen | None:
        return self._objects.get(key)

    def seed(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        for body in bodies:
            self.observe(body)

    def reset(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        """Forget everything, then hold ``bodies`` (a new term's listing: nothing was
        watched while standing by)."""
        self._objects.clear()
        self.seed(bodies)

    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A watch event (or a write's answer) for one object."""
        seen = Seen.of(body)
        held = self._objects.get(seen.key)
        if (
            held is not None
            and held.uid == seen.uid
            and not _newer(seen.resource_version, held.resource_version)
        ):
            return
        if deleted:
            self._objects.pop(seen.key, None)
        else:
            self._objects[seen.key] = seen
