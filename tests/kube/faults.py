"""Scripted faults and the audit trail of requests."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any


@dataclasses.dataclass(frozen=True)
class AuditRecord:
    method: str
    path: str
    query: dict[str, str]
    verb: str  # get list watch create update patch delete deletecollection (or "discovery")
    group: str
    version: str
    resource: str  # plural, "" for discovery
    subresource: str
    namespace: str
    name: str
    user: str
    body: Any
    at: datetime.datetime
    code: int = 0  # filled in when answered
    fault: bool = False

    @property
    def target(self) -> str:
        return self.resource + (f"/{self.subresource}" if self.subresource else "")


@dataclasses.dataclass
class Fault:
    """Answer the next ``times`` matching calls with ``code`` (or hang, or delay) instead
    of serving them: nothing is written. ``times=None`` keeps failing until removed."""

    verb: str | None = None
    resource: str | None = None  # "leases", "scheduledjobs/status", "leases.coordination.k8s.io"
    namespace: str | None = None
    name: str | None = None
    user: str | None = None  # the caller's username (its token's, in ``Emulator.tokens``)
    code: int = 500
    message: str | None = None
    reason: str | None = None
    times: int | None = 1
    hang: bool = False  # no answer until the client gives up (or ``seconds`` pass: then 504)
    delay: float = 0.0  # serve normally, but this much later
    seconds: float = 60.0
    hits: int = 0

    def matches(self, record: AuditRecord) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.verb is not None and self.verb != record.verb:
            return False
        if self.resource is not None and self.resource not in _names(record):
            return False
        if self.namespace is not None and self.namespace != record.namespace:
            return False
        if self.user is not None and self.user != record.user:
            return False
        return self.name is None or self.name == record.name

    @property
    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times


def _names(record: AuditRecord) -> set[str]:
    names = {record.resource, record.target}
    if record.group:
        names |= {f"{record.resource}.{record.group}", f"{record.target}.{record.group}"}
    return names
