"""Jobs across shards: definitions, ad hoc runs, run history and cancellation.

This is the core the API and the operator call: it routes every job to its shard,
computes the next due time of a definition, and turns an enqueue request into a run.
"""

from __future__ import annotations

import enum
import hashlib
import heapq
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

import orjson

from tickwork.core import fields, shards
from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.errors import (
    ConcurrencyLimit,
    IdempotencyKeyReused,
    InvalidRequest,
    ManagedByKubernetes,
    NotFound,
    TickworkError,
)
from tickwork.core.preconditions import NONE as NO_PRECONDITION
from tickwork.core.preconditions import Precondition
from tickwork.core.records import (
    UNRESTRICTED,
    Attempt,
    Definition,
    JobRunSummary,
    JobStatus,
    Manager,
    NewRun,
    Origin,
    ReadyRuns,
    Run,
    Scope,
    State,
)
from tickwork.core.spec import NOTIFY_JOB, JobSpec, Priority
from tickwork.engine import cursors, forwarding
from tickwork.store import clock as store_clock
from tickwork.store import definitions, dlq, enqueue_keys, observe, runs
from tickwork.store.database import Connection, Database

T = TypeVar("T")


async def database_now(conn: Connection, clock: Clock) -> datetime:
    """The instant ``clock`` stands for, reading the database clock when it is real."""
    return await store_clock.now(conn, clock.now())


def next_due_after(spec: JobSpec, after: datetime) -> datetime | None:
    """The first nominal fire time strictly after ``after`` (None for API-only jobs)."""
    if spec.schedule is not None:
        return spec.schedule.compile().next_after(after)
    if spec.run_at is not None:
        return spec.run_at
    return None


def same_fire_times(old: JobSpec, new: JobSpec) -> bool:
    """Whether two specs fire at the same instants. Jitter, missed-run policy and
    starting deadline only change what happens at those instants, so editing them keeps
    ``next_due_at`` (and the catch-up of a paused job) where it is. A DST policy that
    says what the hour field already says (``dst: {repeated: first}`` on ``30 2 * * *``)
    changes no instant either."""
    if old.run_at != new.run_at or (old.schedule is None) != (new.schedule is None):
        return False
    if old.schedule is None or new.schedule is None:
        return True
    if (old.schedule.cron.split(), old.schedule.time_zone) != (
        new.schedule.cron.split(),
        new.schedule.time_zone,
    ):
        return False
    return old.schedule.compile().dst == new.schedule.compile().dst


class Change(enum.StrEnum):
    """What a put did to the stored definition."""

    created = "created"
    updated = "updated"
    unchanged = "unchanged"


@dataclass(frozen=True, slots=True)
class Stored:
    definition: Definition
    change: Change

    @property
    def created(self) -> bool:
        return self.change is Change.created


@dataclass(frozen=True, slots=True)
class JobView:
    definition: Definition
    summary: JobRunSummary


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """An ad hoc run: now, at ``run_at``, or after ``delay_seconds``."""

    run_at: datetime | None = None
    delay_seconds: float | None = None
    payload: Any = None
    payload_given: bool = False
    priority: Priority | None = None
    idempotency_key: str | None = None
    if_not_running: bool = False
    # Where the key came from, for the problem that names it.
    key_field: str = "Idempotency-Key"
    # Where the request is in its body ("runs[3]" in a batch), for the problems that
    # name one of its fields.
    where: str = ""

    def fingerprint(self) -> bytes:
        """SHA-256 of the request's canonical form: what it asks for, not how it was
        spelled (key order, ``+01:00`` or ``Z``, defaults written out or left out)."""
        canonical: dict[str, Any] = {}
        if self.run_at is not None:
            canonical["runAt"] = self.run_at.astimezone(UTC).isoformat()
        if self.delay_seconds is not None:
            canonical["delaySeconds"] = float(self.delay_seconds)
        if self.payload_given:
            canonical["payload"] = self.payload
        if self.priority is not None:
            canonical["priority"] = self.priority.value
        if self.if_not_running:
            canonical["ifNotRunning"] = True
        return hashlib.sha256(orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)).digest()


def _same_request(run: Run, request: EnqueueRequest) -> None:
    """Refuse a known idempotency key used for another request (422)."""
    # Runs made before fingerprints were kept match any request, as they did then.
    if run.request_fingerprint is not None and run.request_fingerprint != request.fingerprint():
        raise IdempotencyKeyReused(
            f"idempotency key {request.idempotency_key!r} was used for run {run.run_id} with "
            "a different request; use a new key for a new request",
            field=request.key_field,
        )


class Jobs:
    def __init__(self, database: Database, clock: Clock | None = None) -> None:
        self.database = database
        self.clock = clock or DatabaseClock()

    def shard_of(self, tenant: str, name: str) -> int:
        return self.database.shard_map.shard_of(tenant, name)

    def locate_run(self, run_id: str) -> tuple[int, int]:
        return shards.parse_run_id(run_id, self.database.shard_count)

    async def held_back(self, tenant: str, name: str) -> dict[str, int]:
        """The job's ready runs its flow control holds back now, by the limit that does
        (``concurrency``, ``rate``): the count behind ``tickwork_runs_held_back``."""
        async with self.database.connection(self.shard_of(tenant, name)) as conn:
            found = await observe.held_back(conn, self.clock.now(), (tenant, name))
        return {held.limit: held.runs for held in found}

    async def put(
        self,
        tenant: str,
        name: str,
        spec: JobSpec,
        actor: str,
        *,
        manager: Manager | None = None,
        precondition: Precondition = NO_PRECONDITION,
    ) -> Stored:
        """Create or replace a job, if it meets ``precondition`` (If-Match, checked under
        the definition's row lock). ``next_due_at`` is recomputed only when the fire
        times changed (cron, timeZone, schedule.dst or runAt), so an edit neither loses
        nor duplicates a run. Putting the spec the job already has writes nothing: no
        generation bump, no audit entry (a manifest applied again, a GitOps resync).

        ``manager`` says where the job is declared (None: the HTTP API). The API may not
        replace a managed job (``ManagedByKubernetes``); a declaration takes over a job
        the API made, since the declaration is what GitOps keeps true."""
        if name == NOTIFY_JOB:
            raise InvalidRequest(f"job name {name!r} is reserved for tickwork", field="name")
        shard = self.shard_of(tenant, name)
        async with self.database.transaction(shard) as conn:
            current = await definitions.lock(conn, shard, tenant, name, exclusive=True)
            precondition.check(None if current is None else current.generation)
            if current is not None:
                refuse_managed(current, manager)
                if (
                    current.managed_by is manager
                    and current.spec.to_document() == spec.to_document()
                ):
                    return Stored(current, Change.unchanged)
            if current is not None and same_fire_times(current.spec, spec):
                next_due = current.next_due_at
            else:
                next_due = next_due_after(spec, await database_now(conn, self.clock))
            definition, created = await definitions.upsert(
                conn, shard, tenant, name, spec, next_due, actor, self.clock.now(), manager
            )
            if current is not None and current.spec.dry_run != spec.dry_run:
                # Switching a shadowed cron over must not leave a run behind in the
                # old mode: every run not leased yet follows.
                await runs.set_dry_run(conn, tenant, name, spec.dry_run)
            return Stored(definition, Change.created if created else Change.updated)

    async def get(self, tenant: str, name: str) -> JobView:
        shard = self.shard_of(tenant, name)
        async with self.database.connection(shard) as conn:
            definition = await definitions.get(conn, shard, tenant, name)
            summary = await runs.summary_of_job(conn, shard, tenant, name)
        return JobView(definition, summary)

    async def list_jobs(
        self, tenant: str, after: str | None, limit: int
    ) -> tuple[list[JobView], str | None]:
        """The tenant's jobs by name, merged across shards; returns ``(page, next)``."""
        per_shard: list[list[Definition]] = []
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                per_shard.append(
                    await definitions.list_of_tenant(conn, shard, tenant, after, limit + 1)
                )
        merged = list(heapq.merge(*per_shard, key=lambda d: d.name))
        page = merged[:limit]
        # One grouped read per shard that holds a job of the page, not one per job.
        by_shard: dict[int, list[str]] = {}
        for definition in page:
            by_shard.setdefault(definition.shard, []).append(definition.name)
        summaries: dict[tuple[int, str], JobRunSummary] = {}
        for shard, names in by_shard.items():
            async with self.database.connection(shard) as conn:
                found = await runs.summaries_of_jobs(conn, shard, tenant, names)
            summaries.update(((shard, name), summary) for name, summary in found.items())
        views = [JobView(d, summaries[(d.shard, d.name)]) for d in page]
        more = len(merged) > limit
        return views, (page[-1].name if more and page else None)

    async def delete(
        self,
        tenant: str,
        name: str,
        actor: str,
        *,
        manager: Manager | None = None,
        precondition: Precondition = NO_PRECONDITION,
    ) -> tuple[int, int]:
        """Delete a job, cancel its pending runs, keep its history; returns ``(cancelled,
        cancel_requested)``. Through the API (``manager`` None) a managed job is refused;
        a declaration deletes only a job it keeps (else ``NotFound``: a ScheduledJob
        that never got stored must not take the API's job of the same name with it)."""
        shard = self.shard_of(tenant, name)
        async with self.database.transaction(shard) as conn:
            current = await definitions.lock(conn, shard, tenant, name, exclusive=True)
            if current is not None:
                refuse_managed(current, manager)
            if current is None or current.managed_by is not manager:
                raise definitions.not_found(tenant, name)
            precondition.check(current.generation)
            return await definitions.delete(conn, tenant, name, actor, self.clock.now())

    async def set_paused(
        self,
        tenant: str,
        name: str,
        paused: bool,
        actor: str,
        *,
        precondition: Precondition = NO_PRECONDITION,
    ) -> Definition:
        """Pause or resume through the API (a managed job is paused in its declaration).

        One exception: a managed job that tickwork paused (``pauseAfterFailures``) while
        its declaration says ``paused: false`` may be resumed here, since that resume
        only ends the pause tickwork made and agrees with the declaration."""
        shard = self.shard_of(tenant, name)
        async with self.database.transaction(shard) as conn:
            current = await definitions.lock(conn, shard, tenant, name, exclusive=True)
            if current is not None:
                precondition.check(current.generation)
            if current is not None and not (
                not paused and current.auto_paused and not current.spec.paused
            ):
                refuse_managed(current, None)
            return await definitions.set_paused(
                conn, shard, tenant, name, paused, actor, self.clock.now()
            )

    async def statuses(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], JobStatus]:
        """The status of the jobs ``keys`` (``(tenant, name)``): one query per shard."""
        by_shard: dict[int, list[tuple[str, str]]] = {}
        for tenant, name in keys:
            by_shard.setdefault(self.shard_of(tenant, name), []).append((tenant, name))
        found: dict[tuple[str, str], JobStatus] = {}
        for shard, wanted in sorted(by_shard.items()):
            async with self.database.connection(shard) as conn:
                for status in await definitions.statuses(conn, shard, wanted):
                    found[(status.tenant, status.name)] = status
        return found

    async def managed(self, manager: Manager, tenants: list[str] | None) -> list[tuple[str, str]]:
        """``(tenant, name)`` of every job ``manager`` keeps in ``tenants`` (None: all)."""
        found: list[tuple[str, str]] = []
        for shard in range(self.database.shard_count):
            async with self.database.connection(shard) as conn:
                found += await definitions.managed(conn, manager, tenants)
        return sorted(found)

    async def enqueue(
        self, tenant: str, name: str, request: EnqueueRequest, actor: str
    ) -> tuple[Run, bool]:
        """Enqueue one run; with a known idempotency key return the first run instead.

        One statement (``runs.enqueue``: one round trip, the first half of a wake-up);
        only ``ifNotRunning``, which reads the job's running runs first, takes a
        transaction of several."""
        if request.if_not_running:
            return await self._enqueue_if_not_running(tenant, name, request, actor)
        if request.run_at is not None and request.delay_seconds is not None:
            raise InvalidRequest("give at most one of runAt and delaySeconds", field="runAt")
        shard = self.shard_of(tenant, name)
        payload_json = None
        if request.payload_given and request.payload is not None:
            payload_json = orjson.dumps(request.payload).decode()
        async with self.database.connection(shard) as conn:
            run = await runs.enqueue(
                conn,
                shard,
                tenant,
                name,
                run_at=request.run_at,
                delay_seconds=request.delay_seconds,
                payload_json=payload_json,
                payload_given=request.payload_given,
                priority=None if request.priority is None else request.priority.rank,
                idempotency_key=request.idempotency_key,
                request_fingerprint=(
                    None if request.idempotency_key is None else request.fingerprint()
                ),
                actor=actor,
                now=self.clock.now(),
            )
            if run is not None:
                return run, True
            # Nothing inserted: there was no such job, the job has a unique or debounce
            # rule (the keyed path below), or the key is taken (and then the job is
            # asked for first: a deleted job's key does not answer its old run).
            definition = await definitions.get(conn, shard, tenant, name)
            if definition.spec.flow_rule is None:
                if request.idempotency_key is None:  # pragma: no cover - made meanwhile
                    raise definitions.not_found(tenant, name)
                first = await runs.by_key(conn, shard, tenant, name, request.idempotency_key)
                if first is None:  # pragma: no cover - the key's run is gone from the history
                    raise RuntimeError("idempotency conflict without a visible row")
                _same_request(first, request)
                return first, False
        # Outside the connection above: the keyed path takes a transaction of its own.
        async with self.database.transaction(shard) as conn:
            definition = await _locked(conn, shard, tenant, name)
            (outcome,) = await self._enqueue_by_key(conn, shard, definition, [request], actor)
        if isinstance(outcome, TickworkError):
            raise outcome
        return outcome

    async def _enqueue_if_not_running(
        self, tenant: str, name: str, request: EnqueueRequest, actor: str
    ) -> tuple[Run, bool]:
        shard = self.shard_of(tenant, name)
        async with self.database.transaction(shard) as conn:
            definition = await definitions.lock(conn, shard, tenant, name, exclusive=False)
            if definition is None:
                await definitions.get(conn, shard, tenant, name)  # raises NotFound
                raise AssertionError("unreachable")
            if request.idempotency_key is not None:
                first = await runs.by_key(conn, shard, tenant, name, request.idempotency_key)
                if first is not None:
                    _same_request(first, request)
                    return first, False
            if request.if_not_running:
                summary = await runs.summary_of_job(conn, shard, tenant, name)
                limit = definition.spec.concurrency or 1
                if summary.active >= limit:
                    raise ConcurrencyLimit(
                        f"job {name!r} has {summary.active} running run(s), its limit is {limit}",
                        field="ifNotRunning",
                    )
            if definition.spec.flow_rule is not None:
                (outcome,) = await self._enqueue_by_key(conn, shard, definition, [request], actor)
                if isinstance(outcome, TickworkError):
                    raise outcome
                return outcome
            now = await database_now(conn, self.clock)
            new = self._new_run(definition, request, now)
            run, created = await runs.insert(conn, shard, new, self.clock.now(), actor)
            if not created:
                _same_request(run, request)
            return run, created

    def _new_run(self, definition: Definition, request: EnqueueRequest, now: datetime) -> NewRun:
        spec = definition.spec
        if request.run_at is not None and request.delay_seconds is not None:
            raise InvalidRequest("give at most one of runAt and delaySeconds", field="runAt")
        ready_at = now
        if request.run_at is not None:
            ready_at = max(request.run_at, now)
        elif request.delay_seconds is not None:
            ready_at = now + timedelta(seconds=request.delay_seconds)
        payload = request.payload if request.payload_given else spec.payload
        priority = request.priority or spec.priority
        return NewRun(
            tenant=definition.tenant,
            job=definition.name,
            queue=spec.queue,
            priority=priority.rank,
            origin=Origin.api,
            max_attempts=spec.retry.max_attempts,
            retry_base=spec.retry.base_seconds,
            retry_max=spec.retry.max_seconds,
            timeout_seconds=spec.timeout_seconds,
            due_at=ready_at,
            ready_at=ready_at,
            idempotency_key=request.idempotency_key,
            payload_json=None if payload is None else orjson.dumps(payload).decode(),
            concurrency=spec.run_concurrency,
            dry_run=spec.dry_run,
            request_fingerprint=(
                None if request.idempotency_key is None else request.fingerprint()
            ),
        )

    async def on_run(self, run_id: str, work: Callable[[Connection, int, int], Awaitable[T]]) -> T:
        """``work(conn, shard, local id)`` on the shard that holds run ``run_id``: the
        one its id names or, when the run moved there in a reshard, the one its
        forwarding rows lead to (``engine.forwarding``)."""
        shard, local = self.locate_run(run_id)
        try:
            async with self.database.connection(shard) as conn:
                return await work(conn, shard, local)
        except NotFound:
            moved = await forwarding.follow(self.database, shard, [local])
            if local not in moved:
                raise
        async with self.database.connection(moved[local]) as conn:
            return await work(conn, moved[local], local)

    async def run(self, run_id: str, scope: Scope = UNRESTRICTED) -> tuple[Run, list[Attempt]]:
        """A run with its attempts, if ``scope`` may see it (``NotFound`` otherwise)."""

        async def read(conn: Connection, shard: int, local: int) -> tuple[Run, list[Attempt]]:
            run = await runs.get(conn, shard, local, scope)
            return run, await runs.attempts(conn, run)

        return await self.on_run(run_id, read)

    async def runs_of_job(
        self,
        tenant: str,
        name: str,
        state: State | None,
        before: str | None,
        limit: int,
    ) -> tuple[list[Run], str | None]:
        shard = self.shard_of(tenant, name)
        before_id = None
        if before is not None:
            cursor_shard, before_id = self.locate_run(before)
            if cursor_shard != shard:
                raise InvalidRequest("cursor does not belong to this job", field="cursor")
        async with self.database.connection(shard) as conn:
            found = await runs.list_of_job(
                conn, shard, tenant, name, state=state, before_id=before_id, limit=limit + 1
            )
        page = found[:limit]
        return page, (page[-1].run_id if len(found) > limit else None)

    async def cancel(self, run_id: str, actor: str, scope: Scope = UNRESTRICTED) -> Run:
        """Cancel a run ``scope`` may see; the check and the cancel are one transaction."""
        return await self.on_run(
            run_id,
            lambda conn, shard, local: runs.cancel(
                conn, shard, local, actor, self.clock.now(), scope
            ),
        )

    async def enqueue_many(
        self, tenant: str, name: str, requests: Sequence[EnqueueRequest], actor: str
    ) -> list[tuple[Run, bool] | TickworkError]:
        """Enqueue many runs of one job in one transaction of its shard. An item whose
        idempotency key was used for another request gets its problem (and, for a job
        with a unique or debounce rule, an item whose payload has no key); the others
        are enqueued."""
        shard = self.shard_of(tenant, name)
        async with self.database.transaction(shard) as conn:
            definition = await _locked(conn, shard, tenant, name)
            if definition.spec.flow_rule is not None:
                return await self._enqueue_by_key(conn, shard, definition, requests, actor)
            now = await database_now(conn, self.clock)
            news = [self._new_run(definition, r, now) for r in requests]
            inserted = await runs.insert_many(conn, shard, news, self.clock.now())
            results: list[tuple[Run, bool] | TickworkError] = []
            created = 0
            for request, (run, was_created) in zip(requests, inserted, strict=True):
                created += was_created
                try:
                    if not was_created:
                        _same_request(run, request)
                except IdempotencyKeyReused as problem:
                    results.append(problem)
                    continue
                results.append((run, was_created))
            if created:
                await runs.audit(
                    conn, tenant, name, None, "enqueue", actor, {"runs": created}, self.clock.now()
                )
            return results

    async def enqueue_ready(
        self, tenant: str, name: str, payloads_json: list[bytes | None], actor: str
    ) -> ReadyRuns | None:
        """Enqueue runs of one job ready now, without keys or times of their own, one
        per payload (JSON text, ``null`` for none; None: the job's payload), in one
        statement whatever their number: the plain batch of ``enqueue_many``. None
        when the job has a unique or debounce rule: that takes ``enqueue_many``."""
        shard = self.shard_of(tenant, name)
        async with self.database.connection(shard) as conn:
            ready = await runs.insert_ready(
                conn, shard, tenant, name, payloads_json, actor, self.clock.now()
            )
            if (
                ready is None
                and (await definitions.get(conn, shard, tenant, name)).spec.flow_rule is None
            ):  # pragma: no cover - the job was made meanwhile
                raise definitions.not_found(tenant, name)
        return ready

    async def _enqueue_by_key(
        self,
        conn: Connection,
        shard: int,
        definition: Definition,
        requests: Sequence[EnqueueRequest],
        actor: str,
    ) -> list[tuple[Run, bool] | TickworkError]:
        """Enqueue runs of a job with a unique or debounce rule, in the caller's
        transaction of the job's shard (the definition held FOR SHARE).

        The requests' keys are taken first (``enqueue_keys.take``: a row lock each, so
        enqueues of a key follow one another whatever replica serves them), then read:
        an Idempotency-Key used before answers its first run; a run that holds its key
        (unique: in the rule's states; debounce: not started yet) answers the requests
        of the key, debounce pushing it first; a key left gets one new run, made by its
        first request (debounce: with the last one's payload) and answering the rest."""
        spec = definition.spec
        rule = spec.flow_rule
        assert rule is not None
        tenant, name = definition.tenant, definition.name
        kind = "unique" if spec.unique is not None else "debounce"
        at = self.clock.now()
        results: list[tuple[Run, bool] | TickworkError | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            problem = _keyless(spec, kind, request)
            if problem is not None:
                results[index] = problem
                continue
            key = rule.key_of(request.payload if request.payload_given else spec.payload)
            if key is None:
                results[index] = InvalidRequest(
                    f"the payload has no value at {rule.key!r}, where the job's {kind}.key points",
                    field=fields.key(request.where, "payload"),
                )
                continue
            groups.setdefault(key, []).append(index)
        holders = await enqueue_keys.take(conn, shard, tenant, name, list(groups), at)
        now = await database_now(conn, self.clock)
        # Read under the keys' locks: a repeated request sees what its first one left.
        for indexes in groups.values():
            for index in list(indexes):
                request = requests[index]
                if request.idempotency_key is None:
                    continue
                first = await runs.by_key(conn, shard, tenant, name, request.idempotency_key)
                if first is None:
                    continue
                indexes.remove(index)
                try:
                    _same_request(first, request)
                except IdempotencyKeyReused as problem:
                    results[index] = problem
                    continue
                if first.idempotency_key != request.idempotency_key:
                    first = replace(first, answered_by=kind)
                results[index] = (first, False)
        groups = {key: indexes for key, indexes in groups.items() if indexes}
        answered: dict[int, Run] = {}
        if spec.debounce is not None:
            waiting = {
                key: run
                for key, run in holders.items()
                if key in groups and run.state in _DEBOUNCED and run.attempt == 0
            }
            lasts = [requests[groups[key][-1]] for key in waiting]
            pushed = await enqueue_keys.debounce(
                conn,
                shard,
                [run.id for run in waiting.values()],
                [_payload_json(spec, last) for last in lasts],
                [(last.priority or spec.priority).rank for last in lasts],
                spec.debounce.seconds,
                spec.debounce.longest_seconds,
                at,
            )
            for key, run in waiting.items():
                if run.id in pushed:
                    answered.update(dict.fromkeys(groups[key], pushed[run.id]))
        elif spec.unique is not None:
            for key, indexes in groups.items():
                holder = holders.get(key)
                if holder is not None and spec.unique.holds(holder.state, holder.finished_at, now):
                    answered.update(dict.fromkeys(indexes, holder))
        makers = [(key, indexes) for key, indexes in groups.items() if indexes[0] not in answered]
        news = [
            self._keyed_run(definition, [requests[i] for i in indexes], now)
            for _, indexes in makers
        ]
        inserted = await runs.insert_many(conn, shard, news, at)
        made: dict[str, int] = {}
        for (key, indexes), (run, created) in zip(makers, inserted, strict=True):
            if created:
                made[key] = run.id
            else:
                _same_request(run, requests[indexes[0]])
            results[indexes[0]] = (run, created)
            answered.update(dict.fromkeys(indexes[1:], run))
        await enqueue_keys.point(conn, tenant, name, list(made), list(made.values()), at)
        keys_answered = []
        for index, run in answered.items():
            results[index] = (replace(run, answered_by=kind), False)
            key = requests[index].idempotency_key
            if key is not None and key != run.idempotency_key:
                keys_answered.append((key, run.id, requests[index].fingerprint()))
        await enqueue_keys.answer_keys(conn, tenant, name, keys_answered, at)
        done = [result for result in results if result is not None]
        assert len(done) == len(requests)
        await _audit_keyed(conn, tenant, name, done, actor, at)
        return done

    def _keyed_run(
        self, definition: Definition, burst: Sequence[EnqueueRequest], now: datetime
    ) -> NewRun:
        """The new run of a key: made by its first request; a debounced one starts
        ``debounce.seconds`` from now with the burst's last payload and priority."""
        new = self._new_run(definition, burst[0], now)
        debounce = definition.spec.debounce
        if debounce is None:
            return new
        last = burst[-1]
        start = now + timedelta(seconds=debounce.seconds)
        return replace(
            new,
            due_at=start,
            ready_at=start,
            payload_json=_payload_json(definition.spec, last),
            priority=(last.priority or definition.spec.priority).rank,
        )

    async def dead_letters(
        self, tenant: str, job: str | None, cursor: DeadCursor | None, limit: int
    ) -> tuple[list[Run], DeadCursor | None]:
        """Dead runs of the tenant, newest death first, merged across shards.

        The order is ``(finishedAt, shard, id)`` descending; the cursor is the last one.
        """
        per_shard: list[list[Run]] = []
        # A notification's delivery run lives on the shard of the run it is about.
        shard_numbers = (
            range(self.database.shard_count)
            if job is None or job == NOTIFY_JOB
            else [self.shard_of(tenant, job)]
        )
        for shard in shard_numbers:
            before = None if cursor is None else cursor.bound_for(shard)
            async with self.database.connection(shard) as conn:
                per_shard.append(await dlq.list_dead(conn, shard, tenant, job, before, limit + 1))
        merged = list(heapq.merge(*per_shard, key=_dead_order, reverse=True))
        page = merged[:limit]
        if len(merged) > limit and page:
            last = page[-1]
            assert last.finished_at is not None
            return page, DeadCursor(last.finished_at, last.shard, last.id)
        return page, None

    async def replay(self, run_id: str, actor: str, scope: Scope = UNRESTRICTED) -> Run:
        """Replay a dead run ``scope`` may see (checked in the replay's transaction)."""
        return await self.on_run(
            run_id,
            lambda conn, shard, local: dlq.act(
                conn, shard, local, "replay", actor, self.clock.now(), scope
            ),
        )

    async def discard(self, run_id: str, actor: str, scope: Scope = UNRESTRICTED) -> Run:
        """Discard a dead run ``scope`` may see (checked in the discard's transaction)."""
        return await self.on_run(
            run_id,
            lambda conn, shard, local: dlq.act(
                conn, shard, local, "discard", actor, self.clock.now(), scope
            ),
        )


# The states of a run a debounced enqueue may still push (never leased: attempt 0).
_DEBOUNCED: Final = frozenset({State.scheduled, State.ready})


async def _locked(conn: Connection, shard: int, tenant: str, name: str) -> Definition:
    """The job's definition, held FOR SHARE until the transaction ends (NotFound)."""
    definition = await definitions.lock(conn, shard, tenant, name, exclusive=False)
    if definition is None:
        await definitions.get(conn, shard, tenant, name)  # raises NotFound
        raise AssertionError("unreachable")
    return definition


def _payload_json(spec: JobSpec, request: EnqueueRequest) -> str | None:
    payload = request.payload if request.payload_given else spec.payload
    return None if payload is None else orjson.dumps(payload).decode()


def _keyless(spec: JobSpec, kind: str, request: EnqueueRequest) -> InvalidRequest | None:
    """Why a request cannot be enqueued by key: a debounced run starts when its burst
    ends, so it takes no time of its own."""
    if spec.debounce is None:
        return None
    for given, field in ((request.run_at, "runAt"), (request.delay_seconds, "delaySeconds")):
        if given is not None:
            return InvalidRequest(
                f"the job debounces its enqueues: a run starts debounce.seconds "
                f"({spec.debounce.seconds}) after the last enqueue of its burst, so {field} "
                "does not apply",
                field=fields.key(request.where, field),
            )
    return None


async def _audit_keyed(
    conn: Connection,
    tenant: str,
    name: str,
    results: Sequence[tuple[Run, bool] | TickworkError],
    actor: str,
    now: datetime | None,
) -> None:
    """One entry for the call: a new run, or a run a debounced enqueue changed; a
    deduplicated enqueue changed nothing and records nothing."""
    answers = [result for result in results if not isinstance(result, TickworkError)]
    made = sum(created for _, created in answers)
    pushed = sum(run.answered_by == "debounce" for run, _ in answers)
    if len(results) == 1 and answers and (made or pushed):
        run, created = answers[0]
        one = None if created else {"debounced": True}
        await runs.audit(conn, tenant, name, run.id, "enqueue", actor, one, now)
    elif len(results) > 1 and (made or pushed):
        detail: dict[str, Any] = {"runs": made}
        if pushed:
            detail["debounced"] = pushed
        await runs.audit(conn, tenant, name, None, "enqueue", actor, detail, now)


def refuse_managed(current: Definition, manager: Manager | None) -> None:
    """The API (``manager`` None) may not change a job a declaration keeps."""
    if manager is None and current.managed_by is not None:
        raise ManagedByKubernetes(
            f"job {current.name!r} is defined by a ScheduledJob: edit the ScheduledJob "
            f"{current.tenant}/{current.name}",
            field="name",
        )


# The DLQ's cursor: the (finishedAt, shard, id) of the last dead run of a page.
DeadCursor = cursors.Position


def _dead_order(run: Run) -> tuple[datetime, int, int]:
    assert run.finished_at is not None
    return (run.finished_at, run.shard, run.id)
