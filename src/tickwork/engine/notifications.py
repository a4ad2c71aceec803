"""Notifications: a tenant's webhook targets, and the delivery of what they are told.

A notification is a run of the system job ``tickwork.notify`` (core.spec.NOTIFY_JOB) on
the queue ``tickwork-notifications``, made in the transaction that ends a run dead or
pauses a job (leases.sql, record_failures) with the idempotency key
``notify/<event>/<run id>``. Delivering it is leasing and completing that run through
the dispatcher like any worker does: a receiver that answers anything but 2xx, or does
not answer in time, fails the attempt, and the run's retries (20 attempts, backoff up to
5 minutes) deliver it once the receiver is back. A delivery that runs out of attempts
is dead like any run, and notifies nobody.

Targets are written to every shard (each shard's statement reads its own copy), one
transaction per shard, as queue pauses are: a shard that cannot be reached fails the
call after the others were written, and calling again is safe. The engine makes no HTTP
request itself: the caller gives ``Deliveries`` the function that posts.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from tickwork.core.clock import Clock
from tickwork.core.errors import NotFound
from tickwork.core.records import Lease, Outcome
from tickwork.core.spec import NOTIFY_QUEUE
from tickwork.engine.dispatch import CompleteItem, Dispatcher
from tickwork.store import notifications
from tickwork.store.database import Database
from tickwork.store.notifications import Target as Target

logger = logging.getLogger(__name__)

# A receiver that has not answered in this many seconds failed the attempt.
POST_TIMEOUT_SECONDS: Final = 10.0
# Longer than a post may take: the lease outlives the attempt.
LEASE_SECONDS: Final = 60.0
WORKER_ID: Final = "tickwork-notifier"


@dataclass(frozen=True, slots=True)
class Request:
    """One webhook call: the body exactly as signed, and its headers."""

    url: str
    body: bytes
    headers: dict[str, str]
    timeout_seconds: float = POST_TIMEOUT_SECONDS


# Posts a request and answers the receiver's status code; raises on a transport error
# or a timeout (the attempt fails and is retried).
Post = Callable[[Request], Awaitable[int]]


class Targets:
    """A tenant's notification targets. Read from the tenant's home shard; written to
    every shard."""

    def __init__(self, database: Database, clock: Clock) -> None:
        self.database = database
        self.clock = clock

    def _home(self, tenant: str) -> int:
        return self.database.shard_map.shard_of(tenant, "")

    async def put(self, tenant: str, target: Target) -> tuple[Target, bool]:
        """Create or replace ``target``; whether it is new."""
        created = await self.get(tenant, target.name) is None
        stored: Target | None = None
        now = self.clock.now()
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                written = await notifications.put(conn, tenant, target, now)
            if shard == self._home(tenant):
                stored = written
        assert stored is not None
        return stored, created

    async def get(self, tenant: str, name: str) -> Target | None:
        async with self.database.connection(self._home(tenant)) as conn:
            return await notifications.get(conn, tenant, name)

    async def list(self, tenant: str) -> list[Target]:
        async with self.database.connection(self._home(tenant)) as conn:
            return await notifications.of_tenant(conn, tenant)

    async def delete(self, tenant: str, name: str) -> None:
        found = False
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                found = await notifications.delete(conn, tenant, name) or found
        if not found:
            raise NotFound(f"no notification target {name!r}", field="name")


def secret_of(target: Target, environ: Mapping[str, str]) -> bytes | None:
    """The HMAC key ``target`` names (its environment variable or file), None when it
    names none; ``LookupError`` naming where it was looked for (never the key)."""
    ref = target.secret_ref
    if ref is None:
        return None
    if "env" in ref:
        value = environ.get(ref["env"])
        if not value:
            raise LookupError(f"environment variable {ref['env']} is not set")
        return value.encode()
    try:
        return Path(ref["file"]).read_bytes().strip()
    except OSError as error:
        raise LookupError(f"cannot read secret file {ref['file']}: {error.strerror}") from None


def signature(key: bytes, body: bytes) -> str:
    """The ``X-Tickwork-Signature`` header of ``body``."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def slack_text(notice: Mapping[str, Any]) -> str:
    job = f"{notice['tenant']}/{notice['job']}"
    error = notice.get("error") or {}
    reason = error.get("message") if isinstance(error, dict) else None
    event = notice["event"]
    if event == "autoPaused":
        head = (
            f":pause_button: tickwork paused job {job} after "
            f"{notice.get('consecutiveDead')} consecutive dead runs"
        )
    elif event == "deadlineMissed":
        head = (
            f":alarm_clock: run {notice['runId']} of job {job} (due {notice.get('dueAt')}) "
            f"had not succeeded by its deadline {notice.get('deadline')}: it is "
            f"{notice.get('state')} (deadlineMissed)"
        )
    elif event == "leasedTooLong":
        head = (
            f":hourglass: attempt {notice.get('attempt')} of run {notice['runId']} of job "
            f"{job} has been leased since {notice.get('leasedAt')} by "
            f"{notice.get('workerId')}, over {notice.get('leasedLongerThanSeconds')} s "
            "(leasedTooLong)"
        )
    else:
        head = f":x: run {notice['runId']} of job {job} is dead"
    lines = [head]
    if reason:
        lines.append(f"error: {reason}")
    lines.append(f"idempotency key: {notice['idempotencyKey']}")
    return "\n".join(lines)


def request_for(
    lease: Lease, target: Target, environ: Mapping[str, str]
) -> tuple[Request, dict[str, Any]]:
    """The webhook call that delivers ``lease``'s notification to ``target``, and the
    notification itself."""
    carried = orjson.loads(lease.payload_json or "{}")
    key = lease.effective_idempotency_key
    # The JSON body: what the delivery run carries, and the key a receiver deduplicates
    # by (``notify/<event>/<run id>``: every attempt of the delivery sends the same).
    notice = {**carried, "idempotencyKey": key}
    body = notice if target.format == "json" else {"text": slack_text(notice)}
    encoded = orjson.dumps(body)
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": key,
        "X-Tickwork-Delivery": key,
        "X-Tickwork-Event": str(carried["event"]),
    }
    secret = secret_of(target, environ)
    if secret is not None:
        headers["X-Tickwork-Signature"] = signature(secret, encoded)
    return Request(target.url, encoded, headers), notice


class Deliveries:
    """Leases ``tickwork.notify`` runs from the dispatcher, posts each to its target,
    and completes the run: succeeded on a 2xx, failed (retried) otherwise."""

    def __init__(
        self,
        database: Database,
        dispatcher: Dispatcher,
        post: Post,
        *,
        environ: Mapping[str, str] | None = None,
        batch: int = 16,
    ) -> None:
        self.database = database
        self.dispatcher = dispatcher
        self.post = post
        self.environ = os.environ if environ is None else environ
        self.batch = batch

    async def deliver_ready(self, wait_seconds: float = 0.0) -> int:
        """Deliver the notifications ready now (waiting up to ``wait_seconds`` for
        one); how many were leased."""
        leased = await self.dispatcher.lease(
            [NOTIFY_QUEUE],
            limit=self.batch,
            worker_id=WORKER_ID,
            lease_seconds=LEASE_SECONDS,
            wait_seconds=wait_seconds,
        )
        if leased:
            done = await asyncio.gather(*(self._deliver(lease) for lease in leased))
            await self.dispatcher.complete(done)
        return len(leased)

    async def run(self, stop: asyncio.Event, wait_seconds: float = 5.0) -> None:
        """Deliver until ``stop`` is set."""
        while not stop.is_set():
            try:
                await self.deliver_ready(wait_seconds)
            except (ConnectionError, OSError):
                # A shard down: the runs wait there, leased again once it is back.
                logger.warning("notification delivery: store unavailable", exc_info=True)
                await asyncio.sleep(1.0)

    async def _deliver(self, lease: Lease) -> CompleteItem:
        carried = orjson.loads(lease.payload_json or "{}")
        async with self.database.connection(lease.shard) as conn:
            target = await notifications.get(conn, lease.tenant, str(carried.get("target")))
        if target is None:
            return _failed(lease, f"no notification target {carried.get('target')!r}", False)
        try:
            request, notice = request_for(lease, target, self.environ)
        except LookupError as error:
            return _failed(lease, f"secret of target {target.name!r}: {error}", True)
        try:
            status = await self.post(request)
        except Exception as error:  # any transport failure or timeout: retried
            return _failed(lease, f"POST {target.name!r}: {type(error).__name__}", True)
        if not 200 <= status < 300:
            return _failed(lease, f"POST {target.name!r}: answered {status}", True)
        async with self.database.connection(lease.shard) as conn:
            await notifications.record_delivery(
                conn,
                lease.tenant,
                str(carried["job"]),
                lease.id,
                {
                    "event": notice["event"],
                    "target": target.name,
                    "idempotencyKey": notice["idempotencyKey"],
                    "deliveryRunId": lease.run_id,
                    "attempt": lease.attempt,
                },
            )
        return CompleteItem(lease.run_id, lease.fencing_token, Outcome.succeeded)


def _failed(lease: Lease, reason: str, retryable: bool) -> CompleteItem:
    return CompleteItem(
        lease.run_id, lease.fencing_token, Outcome.failed, {"message": reason}, retryable
    )
