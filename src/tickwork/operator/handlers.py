"""The Kopf handlers: each parses what Kopf hands it, calls one function of the engine's
reconcile core and writes ``status`` (through Kopf's patch) and Events.

- create, update of ``spec`` and resume (every object, at each start): ``apply``;
- delete (Kopf's finalizer holds the object until it succeeds): ``remove``;
- validate (the admission webhook, CREATE and UPDATE): ``parse``;
- every watch event: the object cache the status pass compares with.

A store outage is not a crash: the object gets ``Ready=False, reason StoreUnavailable``
and Kopf tries again later (a deleted object waits on its finalizer meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import kopf

from tickwork.core.testsignal import Signals, TestSignal
from tickwork.engine import manifests, outages
from tickwork.engine.jobs import Change
from tickwork.engine.manifests import ManifestError
from tickwork.engine.reconcile import Applied, Reconciler
from tickwork.operator import admission, status
from tickwork.operator.events import EventRecorder, Reason
from tickwork.operator.objects import Key, ObjectCache, Seen

logger = logging.getLogger("tickwork.operator")

GROUP: Final = manifests.API_GROUP
VERSION: Final = manifests.API_VERSION
PLURAL: Final = manifests.PLURAL
FINALIZER: Final = f"{GROUP}/finalizer"


@dataclass
class OperatorSignals(Signals):
    """What a test can wait on (``operator.test_signals.init()`` before ``run()``)."""

    reconciled: TestSignal[Key] = field(default_factory=lambda: TestSignal("reconciled"))
    """The reconcile handler of an object returned (its status patch, if any, follows)."""


@dataclass
class Context:
    """What the handlers need, passed to Kopf as the operator's memo (no globals)."""

    reconciler: Reconciler
    objects: ObjectCache
    events: EventRecorder
    login: Callable[[], Any]  # -> Awaitable[kopf.ConnectionInfo]
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    store_retry_seconds: float = 5.0
    # Handlers in flight per shard, at most as many as its pool has connections: a
    # thousand objects applied at once queue here, not on the pool (whose wait is
    # bounded, and would read as an outage).
    slots: dict[int, asyncio.Semaphore] = field(default_factory=dict)
    slots_per_shard: int = 4
    signals: OperatorSignals = field(default_factory=OperatorSignals)

    @contextlib.asynccontextmanager
    async def store_slot(self, namespace: str, name: str) -> AsyncIterator[None]:
        shard = self.reconciler.jobs.shard_of(namespace, name)
        slot = self.slots.setdefault(shard, asyncio.Semaphore(self.slots_per_shard))
        async with slot:
            yield

    def stored(self, body: Mapping[str, Any], patch: kopf.Patch, applied: Applied) -> None:
        current = body.get("status") or {}
        generation = (body.get("metadata") or {}).get("generation")
        wanted = status.stored(current, applied.status, generation, self.now())
        patch.status.update(status.changes(current, wanted))
        if applied.change is not Change.unchanged:
            what = "created" if applied.change is Change.created else "updated"
            self.events.record(
                Seen.of(body).reference,
                Reason.scheduled,
                f"definition {what} in shard {applied.status.shard} "
                f"(generation {applied.definition.generation})",
            )

    def invalid(self, body: Mapping[str, Any], patch: kopf.Patch, error: ManifestError) -> None:
        current = body.get("status") or {}
        generation = (body.get("metadata") or {}).get("generation")
        wanted = status.with_ready(
            current, status.Reason.invalid_spec, error.detail, generation, self.now()
        )
        changes = status.changes(current, wanted)
        if not changes:  # already said for this generation (a restart, a resync)
            return
        patch.status.update(changes)
        self.events.record(Seen.of(body).reference, Reason.invalid_spec, error.detail)

    def unavailable(
        self, body: Mapping[str, Any], patch: kopf.Patch, error: Exception
    ) -> kopf.TemporaryError:
        """Say on the object that the store is out; the error that has Kopf retry later."""
        current = body.get("status") or {}
        generation = (body.get("metadata") or {}).get("generation")
        message = f"the job store cannot be reached, retrying: {outages.describe(error)}"
        wanted = status.with_ready(
            current, status.Reason.store_unavailable, message, generation, self.now()
        )
        patch.status.update(status.changes(current, wanted))
        return kopf.TemporaryError(
            f"store unavailable: {outages.describe(error)}", delay=self.store_retry_seconds
        )


def _context(memo: Any) -> Context:
    context: Context = memo.context
    return context


def _source(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"ScheduledJob {meta.get('namespace')}/{meta.get('name')}"


def register(
    registry: kopf.OperatorRegistry, *, admission_webhook: bool = True, resources: bool = True
) -> None:
    """Register the operator's handlers on ``registry``: the resource handlers (not with
    ``resources=False``: a standby's Kopf serves admission only) and the validating one
    (only with a webhook server to serve it: Kopf refuses to run one without)."""

    @kopf.on.login(registry=registry)
    async def login(memo: Any, **_: Any) -> kopf.ConnectionInfo:
        info: kopf.ConnectionInfo = await _context(memo).login()
        return info

    if resources:
        _register_resources(registry)
    if admission_webhook:
        _register_admission(registry)


def _register_resources(registry: kopf.OperatorRegistry) -> None:

    # Async, as every handler here: Kopf runs plain functions in a thread pool.
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry, id="observe")
    async def observe(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
        _context(memo).objects.observe(body, deleted=event.get("type") == "DELETED")

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry, id="reconcile")
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry, id="reconcile")
    @kopf.on.update(GROUP, VERSION, PLURAL, registry=registry, id="reconcile", field="spec")
    async def reconcile(body: kopf.Body, patch: kopf.Patch, memo: Any, **_: Any) -> None:
        context = _context(memo)
        meta = body.get("metadata") or {}
        key: Key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        try:
            async with context.store_slot(*key):
                applied = await context.reconciler.apply_object(body, _source(body))
        except ManifestError as error:
            context.invalid(body, patch, error)
            context.signals.reconciled.signal(key)
            return
        except Exception as error:
            if not outages.is_outage(error):
                raise
            raise context.unavailable(body, patch, error) from error
        context.stored(body, patch, applied)
        context.signals.reconciled.signal(key)

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, id="remove")
    async def remove(
        body: kopf.Body, name: str, namespace: str | None, patch: kopf.Patch, memo: Any, **_: Any
    ) -> None:
        context = _context(memo)
        try:
            async with context.store_slot(namespace or "", name):
                removed = await context.reconciler.remove(namespace or "", name)
        except Exception as error:
            if not outages.is_outage(error):
                raise
            raise context.unavailable(body, patch, error) from error
        if removed is not None:
            logger.info(
                "deleted job %s/%s: %d pending run(s) cancelled, %d asked to stop",
                namespace,
                name,
                removed.cancelled,
                removed.cancel_requested,
                extra={"action": "operator-delete"},
            )


def _register_admission(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.validate(
        GROUP,
        VERSION,
        PLURAL,
        registry=registry,
        id=admission.HANDLER_ID,
        operations=list(admission.OPERATIONS),
    )
    async def validate(
        memo: Any,
        operation: str = "",
        new: kopf.Body | None = None,
        old: kopf.Body | None = None,
        **_: Any,
    ) -> None:
        refused = admission.refusal(operation, new, old, _context(memo).reconciler.parse)
        if refused is not None:
            meta = (new.get("metadata") if new is not None else None) or {}
            logger.info(
                "refused %s of ScheduledJob %s/%s: %s",
                operation,
                meta.get("namespace"),
                meta.get("name"),
                refused,
                extra={"action": "operator-admission-refused"},
            )
            raise kopf.AdmissionError(refused, code=admission.REFUSAL_CODE)
