"""The worker path across shards: lease (long-polling), heartbeat, complete, routed by
run id.

A lease request visits shards from a rotating start, one single-shard claim each, until
it has ``max`` runs; a shard that fails or does not answer a claim in time is skipped
for a backoff (``shard_health``), so one broken shard does not slow the others.
Finding none, it waits for a notification of ready runs in its queues
(``store.wakeup``, one LISTEN connection per shard), looking again at least every few
seconds in case a notification was lost. Heartbeats and completions are grouped by
the shard their run ids encode, one transaction per shard touched (concurrently), with
one result per item in request order. The caller's ``Scope`` goes down into the SQL: a
worker touches only its tenant's runs in its queues.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import field
from datetime import datetime
from typing import Any, TypeVar

from tickwork.core import shards
from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.errors import NotFound, StoreUnavailable, TickworkError
from tickwork.core.fairness import PriorityShares
from tickwork.core.hot import hot_record
from tickwork.core.queue_limits import QueueRateLimit
from tickwork.core.records import (
    UNRESTRICTED,
    Beat,
    Completed,
    Completion,
    Extended,
    Lease,
    Outcome,
    Scope,
)
from tickwork.engine import forwarding
from tickwork.engine.queue_windows import HeldBack, QueueWindows
from tickwork.engine.shard_health import ShardHealth
from tickwork.store import leases, outages
from tickwork.store.database import Database
from tickwork.store.wakeup import ReadySignal

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# Of the given queues, those a caller may act in (its RBAC, asked by the API): what
# narrows a heartbeat's or a completion's scope once the runs' queues are read.
QueueGrant = Callable[[frozenset[str]], Awaitable[frozenset[str]]]

# Seconds a worker waits before repeating an item whose shard was down (the same as a
# whole call's 503 store-unavailable).
ITEM_RETRY_AFTER = 1.0


@hot_record
class HeartbeatItem:
    run_id: str
    fencing_token: int
    extend_seconds: float


@hot_record
class CompleteItem:
    run_id: str
    fencing_token: int
    outcome: Outcome
    error: dict[str, Any] | None = field(default=None)
    retryable: bool = True
    delay_seconds: float = 0.0  # a snooze's wait


class Dispatcher:
    def __init__(
        self,
        database: Database,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        *,
        wakeups: ReadySignal | None = None,
        shares: PriorityShares | None = None,
        claim_seconds: float = 2.0,
        queue_rates: Mapping[str, QueueRateLimit] | None = None,
        queue_held_back: HeldBack | None = None,
    ) -> None:
        self.database = database
        self.clock = clock or DatabaseClock()
        self.rng = rng
        # Wakes long-polls when runs become ready; started by ``start()``.
        self.wakeups = wakeups or ReadySignal(database.shard_map)
        # The stride passes of the priority weights, carried from one claim to the next.
        self.shares = shares or PriorityShares()
        # Which claim statement each (shard, queues, tenant) last needed: this database's
        # alone, as its shard numbers are.
        self.claim_shapes = leases.ClaimShapes()
        self._start = itertools.count()
        # A shard's claim that takes longer than this is left to finish on its own
        # (its runs given back) while the request goes on with the other shards; far
        # longer than a healthy claim takes.
        self.claim_seconds = claim_seconds
        self.probe_seconds = min(claim_seconds, 0.25)
        self.health = ShardHealth()
        self._late: set[asyncio.Task[Any]] = set()
        # Queue-wide rate limits (--queue-rate-limit); None: no queue has one.
        self.windows = (
            QueueWindows(
                database, queue_rates, held_back=queue_held_back, bound_seconds=claim_seconds
            )
            if queue_rates
            else None
        )

    async def start(self) -> None:
        """Listen for ready runs on every shard (a long-poll without it only rechecks)."""
        await self.wakeups.start()

    async def stop(self) -> None:
        await self.wakeups.stop()

    async def lease(
        self,
        queues: Sequence[str],
        *,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        tenant: str | None = None,
        wait_seconds: float = 0.0,
        recheck_seconds: float = 5.0,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> list[Lease]:
        """Claim up to ``limit`` runs of ``queues`` (of ``tenant`` only, if given);
        finding none, wait up to ``wait_seconds`` for some to become ready, looking
        again at least every ``recheck_seconds``.

        ``gone`` tells whether the requester went away: the wait ends then, and runs
        claimed for a requester that is gone are given back (nobody would heartbeat
        them, and they would sit out the lease and lose an attempt).
        """

        if wait_seconds <= 0:
            return await self._claim(queues, limit, worker_id, lease_seconds, tenant)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        # Registered before the first look, so a run made ready while we look wakes us
        # again: one visit of the shards, not one before and one after registering.
        waited = False
        async with self.wakeups.waiter(queues) as waiter:
            granted = await self._claim(queues, limit, worker_id, lease_seconds, tenant)
            while not granted:
                waited = True
                remaining = deadline - loop.time()
                if remaining <= 0 or (gone is not None and await gone()):
                    break
                woken = await waiter.wait(min(remaining, recheck_seconds))
                notified = sorted(waiter.shards)
                waiter.shards.clear()
                if woken and notified:
                    # Woken for runs of these shards: claim there only, and answer at
                    # once with what they gave (the worker's next call visits all).
                    granted = await self._claim(
                        queues, limit, worker_id, lease_seconds, tenant, notified, only=True
                    )
                else:
                    # The recheck, or a listener back after an outage: every shard.
                    granted = await self._claim(queues, limit, worker_id, lease_seconds, tenant)
        # Only a request that waited can have been given up on: one answered by its
        # first look is as fresh as a call that does not wait (and the check costs a
        # turn of the event loop on the hot path).
        if granted and waited and gone is not None and await gone():
            await self.release(granted)
            return []
        return granted

    async def _claim(
        self,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        lease_seconds: float,
        tenant: str | None,
        prefer: Iterable[int] = (),
        *,
        only: bool = False,
    ) -> list[Lease]:
        """One visit of the shards (see ``_visit``); queues with a rate limit are
        claimed apart, each within what its window grants."""
        limited = self.windows.limited(queues) if self.windows is not None else []
        if not limited:
            return await self._visit(
                queues, limit, worker_id, lease_seconds, tenant, prefer, only=only
            )
        plain = [queue for queue in queues if queue not in limited]
        # The plain queues and each limited queue in turn, from a rotating start: a
        # backlog in one never keeps a worker of several from the others.
        parts: list[list[str]] = ([plain] if plain else []) + [[queue] for queue in limited]
        first = next(self._start) % len(parts)
        granted: list[Lease] = []
        failure: BaseException | None = None
        answered = False
        for part in parts[first:] + parts[:first]:
            if len(granted) >= limit:
                break
            wanted = limit - len(granted)
            try:
                if part is plain:
                    claimed = await self._visit(
                        part, wanted, worker_id, lease_seconds, tenant, prefer, only=only
                    )
                else:
                    claimed = await self._claim_windowed(
                        part[0], wanted, worker_id, lease_seconds, tenant, prefer, only
                    )
            except Exception as error:
                if not (isinstance(error, StoreUnavailable) or outages.is_outage(error)):
                    raise
                failure = error
                continue
            answered = True
            granted += claimed
        if not answered and not granted and not only:
            raise failure or StoreUnavailable("every shard failed its last claim; retry shortly")
        return granted

    async def _claim_windowed(
        self,
        queue: str,
        wanted: int,
        worker_id: str,
        lease_seconds: float,
        tenant: str | None,
        prefer: Iterable[int],
        only: bool,
    ) -> list[Lease]:
        """Runs of a rate-limited ``queue``: leases taken from its window first, at most
        that many claimed, the rest given back. One instant for the take and the claims,
        so a pinned clock sees the window and the leases agree."""
        windows = self.windows
        assert windows is not None
        now = self.clock.now()
        taken = await windows.take(queue, wanted, now)
        if taken is None:
            raise StoreUnavailable(f"the rate window of queue {queue!r} cannot be read")
        if taken.granted == 0:
            await windows.settle(taken, 0)
            return []
        claimed: list[Lease] = []
        try:
            claimed = await self._visit(
                [queue], taken.granted, worker_id, lease_seconds, tenant, prefer, only=only, now=now
            )
        finally:
            await windows.settle(taken, len(claimed))
        return claimed

    async def _visit(
        self,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        lease_seconds: float,
        tenant: str | None,
        prefer: Iterable[int] = (),
        *,
        only: bool = False,
        now: datetime | None = None,
    ) -> list[Lease]:
        """One visit of the shards, round-robin from a rotating start (the ``prefer``
        shards first: those that just notified ready runs; with ``only``, those alone)."""
        count = self.database.shard_count
        first = next(self._start) % count
        granted: list[Lease] = []
        preferred = [shard for shard in prefer if 0 <= shard < count]
        order = preferred + [
            shard
            for shard in ((first + n) % count for n in range(count))
            if shard not in preferred and not only
        ]
        failure: BaseException | None = None
        answered = False
        for shard in order:
            try:
                claimed = await self._claim_on(
                    shard, queues, limit - len(granted), worker_id, lease_seconds, tenant, now
                )
            except Exception as error:
                if not outages.is_outage(error):
                    raise
                failure = error
                continue
            if claimed is None:
                continue  # skipped: it failed a moment ago
            answered = True
            granted += claimed
            if len(granted) >= limit:
                break
        if not answered and not granted and not only:
            # Not one shard answered: the store is down, not merely without work (a
            # visit of the notified shards alone leaves that to the next full visit).
            if failure is not None:
                raise failure
            raise StoreUnavailable("every shard failed its last claim; retry shortly")
        return granted

    async def _claim_on(
        self,
        shard: int,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        lease_seconds: float,
        tenant: str | None,
        now: datetime | None = None,
    ) -> list[Lease] | None:
        """One shard's claim, given ``claim_seconds`` at most; None when the shard is
        skipped after a recent failure. A claim that answers late is not lost: the
        runs it leased are given back as soon as it does."""
        if self.health.skipping(shard):
            return None
        at = self.clock.now() if now is None else now

        async def claim() -> list[Lease]:
            async with self.database.claim_connection(shard) as conn:
                return await leases.claim(
                    conn,
                    shard,
                    queues,
                    limit,
                    worker_id,
                    lease_seconds,
                    at,
                    tenant,
                    self.shares,
                    self.claim_shapes,
                )

        # A shard that failed lately is tried with a short bound: a request should not
        # pay the full bound each time the backoff lets the shard be tried again.
        bound = self.probe_seconds if self.health.suspect(shard) else self.claim_seconds
        task = asyncio.create_task(claim())
        done, _ = await asyncio.wait({task}, timeout=bound)
        if not done:
            self._late.add(task)
            task.add_done_callback(self._give_back)
            pause = self.health.failed(shard)
            logger.warning(
                "shard %d: no claim answer within %gs; skipped for %.1fs",
                shard,
                bound,
                pause,
                extra={"action": "claim-skipped", "shard": shard},
            )
            raise TimeoutError(f"shard {shard} did not answer a claim in time")
        try:
            claimed = task.result()
        except Exception as error:
            if outages.is_outage(error):
                pause = self.health.failed(shard)
                logger.warning(
                    "shard %d: claim failed (%s); skipped for %.1fs",
                    shard,
                    outages.describe(error),
                    pause,
                    extra={"action": "claim-skipped", "shard": shard},
                )
            raise
        self.health.succeeded(shard)
        return claimed

    def _give_back(self, task: asyncio.Task[list[Lease]]) -> None:
        self._late.discard(task)
        if task.cancelled() or task.exception() is not None or not task.result():
            return
        giving = asyncio.create_task(self.release(task.result()))
        self._late.add(giving)
        giving.add_done_callback(self._late.discard)

    async def release(self, granted: Sequence[Lease]) -> None:
        """Give back leases whose requester went away before receiving them."""
        by_shard: dict[int, list[Lease]] = {}
        for lease in granted:
            by_shard.setdefault(lease.shard, []).append(lease)
        for shard, group in by_shard.items():
            async with self.database.connection(shard) as conn:
                await leases.release(conn, group, self.clock.now())

    async def heartbeat(
        self,
        items: Sequence[HeartbeatItem],
        scope: Scope = UNRESTRICTED,
        grant: QueueGrant | None = None,
    ) -> list[Extended | TickworkError]:
        """Extend leases the caller holds, in ``scope``; with ``grant``, only runs in
        the queues it grants (the others are absent, as runs that do not exist)."""

        async def per_shard(
            shard: int, group: list[tuple[int, HeartbeatItem]]
        ) -> list[Extended | TickworkError]:
            beats = [Beat(local, i.fencing_token, i.extend_seconds) for local, i in group]
            granted = await self._granted(shard, [b.id for b in beats], scope, grant)
            async with self.database.connection(shard) as conn:
                return await leases.heartbeat(conn, shard, beats, self.clock.now(), granted)

        return await self._route(items, per_shard)

    async def complete(
        self,
        items: Sequence[CompleteItem],
        scope: Scope = UNRESTRICTED,
        grant: QueueGrant | None = None,
    ) -> list[Completed | TickworkError]:
        """Record outcomes of leases the caller holds, in ``scope`` and, with
        ``grant``, the queues it grants."""

        async def per_shard(
            shard: int, group: list[tuple[int, CompleteItem]]
        ) -> list[Completed | TickworkError]:
            completions = [
                Completion(local, i.fencing_token, i.outcome, i.error, i.retryable, i.delay_seconds)
                for local, i in group
            ]
            granted = await self._granted(shard, [c.id for c in completions], scope, grant)
            async with self.database.connection(shard) as conn:
                return await leases.complete(
                    conn, shard, completions, self.clock.now(), self.rng, granted
                )

        return await self._route(items, per_shard)

    async def _granted(
        self, shard: int, run_ids: Sequence[int], scope: Scope, grant: QueueGrant | None
    ) -> Scope:
        """``scope`` narrowed to the queues ``grant`` allows among those of the runs.
        The connection is given back while ``grant`` decides (it may ask the
        Kubernetes API server); a run's queue never changes, so the answer holds when
        the statement runs."""
        if grant is None:
            return scope
        if scope.tenant is None:
            raise ValueError("a queue grant needs a tenant scope")
        async with self.database.connection(shard) as conn:
            queues = await leases.queues_of(conn, run_ids, scope.tenant)
        allowed = await grant(queues) if queues else frozenset()
        return Scope(tenant=scope.tenant, queues=tuple(sorted(allowed)))

    async def _route(
        self,
        items: Sequence[T],
        per_shard: Callable[[int, list[tuple[int, T]]], Awaitable[list[R | TickworkError]]],
    ) -> list[R | TickworkError]:
        results: list[R | TickworkError | None] = [None] * len(items)
        groups: dict[int, list[tuple[int, int, T]]] = {}
        count = self.database.shard_count
        for index, item in enumerate(items):
            try:
                run_id: str = item.run_id  # type: ignore[attr-defined]
                shard, local = shards.parse_run_id(run_id, count)
            except NotFound as error:
                results[index] = error
                continue
            groups.setdefault(shard, []).append((index, local, item))
        await self._answer(groups, per_shard, results, whole_call=True)
        # A run not on the shard its id names may have moved in a reshard: the items
        # found there are answered again on the shard their run is on now.
        missing: dict[int, list[tuple[int, int, T]]] = {}
        for shard, group in groups.items():
            for index, local, item in group:
                if isinstance(results[index], NotFound):
                    missing.setdefault(shard, []).append((index, local, item))
        if missing:
            moved = await asyncio.gather(
                *(
                    forwarding.follow(self.database, shard, [local for _, local, _ in group])
                    for shard, group in missing.items()
                ),
                return_exceptions=True,
            )
            again: dict[int, list[tuple[int, int, T]]] = {}
            for shard, group, where in zip(missing, missing.values(), moved, strict=True):
                if isinstance(where, BaseException):
                    if not isinstance(where, Exception) or not outages.is_outage(where):
                        raise where
                    for index, _, _ in group:
                        results[index] = _unavailable(shard, where)
                    continue
                for index, local, item in group:
                    if local in where:
                        again.setdefault(where[local], []).append((index, local, item))
            await self._answer(again, per_shard, results, whole_call=False)
        return [r for r in results if r is not None]

    @staticmethod
    async def _answer(
        groups: dict[int, list[tuple[int, int, T]]],
        per_shard: Callable[[int, list[tuple[int, T]]], Awaitable[list[R | TickworkError]]],
        results: list[R | TickworkError | None],
        *,
        whole_call: bool,
    ) -> None:
        """Answer each group on its shard. ``whole_call``: these are all the call's
        items, so when every shard failed the call fails (503, as for one shard)."""
        answers = await asyncio.gather(
            *(
                per_shard(shard, [(local, item) for _, local, item in group])
                for shard, group in groups.items()
            ),
            return_exceptions=True,
        )
        failed = [a for a in answers if isinstance(a, BaseException)]
        everything = whole_call and len(failed) == len(answers)
        if failed and (everything or not all(map(outages.is_outage, failed))):
            # Nothing went through (a 503 for the whole call, as for one shard), or
            # something other than an outage went wrong: that is the caller's answer.
            raise failed[0]
        for shard, group, answer in zip(groups, groups.values(), answers, strict=True):
            if isinstance(answer, BaseException):
                # One shard down fails only its items: the others' heartbeats and
                # completions went through, and the worker repeats just these.
                logger.warning(
                    "shard %d: %d item(s) not applied (%s)",
                    shard,
                    len(group),
                    outages.describe(answer),
                    extra={"action": "store-unavailable", "shard": shard},
                )
                answer = [_unavailable(shard, answer)] * len(group)
            for (index, _, _), result in zip(group, answer, strict=True):
                results[index] = result


def _unavailable(shard: int, error: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        f"shard {shard} is unavailable ({outages.describe(error)}); repeat this item shortly",
        retry_after=ITEM_RETRY_AFTER,
    )
