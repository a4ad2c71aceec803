"""Leases: claim, heartbeat, complete and release (the scheduler's sweeps are in
``sweeps``).

Each function is one single-shard transaction. A fencing token is drawn from the shard's
sequence at every lease grant; heartbeat and completion must carry the run's current
token, and anything else is a ``StaleLease`` that changes nothing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar

import asyncpg
import orjson

from tickwork.core import fairness, limits, retry, shards
from tickwork.core.errors import NotFound, StaleLease, TickworkError
from tickwork.core.records import (
    UNRESTRICTED,
    Beat,
    Completed,
    Completion,
    Extended,
    Lease,
    Outcome,
    Scope,
    State,
)
from tickwork.store import queries
from tickwork.store.database import Connection
from tickwork.store.runs import notify_ready


class SQL(queries.Statements):
    claim: str
    claim_one_head: str
    claim_limited: str
    generic_plan: str
    lock_flow: str
    flow_strategies: str
    heartbeat: str
    complete_succeeded: str
    lock_leased: str
    record_failures: str
    record_snoozes: str
    lock_definitions_of_runs: str
    completion_of: str
    run_state: str
    run_queues: str
    release: str


# The benchmarks time these statements by these names.
CLAIM: Final = SQL.claim
CLAIM_ONE_HEAD: Final = SQL.claim_one_head
COMPLETE_SUCCEEDED: Final = SQL.complete_succeeded


# The passes of claims made without a dispatcher's own (tests, tools): process-wide.
SHARED_PRIORITY_SHARES: Final = fairness.PriorityShares()


async def claim(
    conn: Connection,
    shard: int,
    queues: Sequence[str],
    limit: int,
    worker_id: str,
    lease_seconds: float,
    now: datetime | None = None,
    tenant: str | None = None,
    shares: fairness.PriorityShares | None = None,
    shapes: ClaimShapes | None = None,
) -> list[Lease]:
    """Lease up to ``limit`` ready runs of ``queues`` (of ``tenant`` only, if given).

    Priorities share the batch by their weights (``shares``), tenants take turns within
    a priority, oldest ready first within a tenant; see the ``claim`` query. The leases
    come back by priority, then oldest ready. ``shapes`` is what earlier claims on this
    database found, which picks the statement (``ClaimShapes``).
    """
    if not 1 <= limit <= limits.MAX_LEASE_BATCH:
        raise ValueError(f"limit must be 1..{limits.MAX_LEASE_BATCH}")
    shares = shares or SHARED_PRIORITY_SHARES
    arguments = (list(queues), limit, worker_id, now, lease_seconds, tenant)
    rows = await _claim_rows(
        conn,
        (shard, tuple(queues), tenant),
        arguments,
        shares,
        SHARED_CLAIM_SHAPES if shapes is None else shapes,
    )
    shares.record(row["priority"] for row in rows)
    rows.sort(key=lambda row: (row["priority"], row["ready_at"], row["id"]))
    return [
        Lease(
            shard,
            row["id"],
            row["tenant"],
            row["job"],
            row["queue"],
            row["priority"],
            row["attempt"],
            row["max_attempts"],
            row["idempotency_key"],
            row["fencing_token"],
            row["due_at"],
            row["ready_at"],
            row["leased_at"],
            row["lease_expires_at"],
            row["deadline"],
            row["payload"],
            row["dry_run"],
        )
        for row in rows
    ]


_ONE_HEAD: Final = 1
_MANY_HEADS: Final = 2
_LIMITED: Final = 3
_SHAPES_KEPT: Final = 4096

# What a claim is for: (shard, queues, tenant).
_ShapeKey = tuple[int, tuple[str, ...], str | None]


class ClaimShapes:
    """Per (shard, queues, tenant): the shape the last claim found, which picks the next
    claim's statement (``_claim_rows``). Owned by what claims for one database (the
    dispatcher): shard numbers name other shards in another database, whose shapes
    must not steer these claims. Bounded: a key not found costs a probe."""

    __slots__ = ("_shapes",)

    def __init__(self) -> None:
        self._shapes: dict[_ShapeKey, int] = {}

    def get(self, key: _ShapeKey) -> int:
        return self._shapes.get(key, _ONE_HEAD)

    def remember(self, key: _ShapeKey, shape: asyncpg.Record) -> None:
        if len(self._shapes) >= _SHAPES_KEPT:
            self._shapes.clear()
        if shape["limited"]:
            self._shapes[key] = _LIMITED
        else:
            self._shapes[key] = _MANY_HEADS if shape["heads"] > 1 else _ONE_HEAD


# The shapes of claims made without a dispatcher's own (tests, tools), like their
# passes (SHARED_PRIORITY_SHARES): process-wide.
SHARED_CLAIM_SHAPES: Final = ClaimShapes()


async def _claim_rows(
    conn: Connection,
    key: _ShapeKey,
    arguments: tuple[Any, ...],
    shares: fairness.PriorityShares,
    shapes: ClaimShapes,
) -> list[asyncpg.Record]:
    """The leased rows: through ``claim_one_head`` while one head holds all the ready
    work (the common case of one team's backlog, and every idle poll), through the
    merging ``claim`` when there are several, and through ``_claim_limited`` (a
    transaction holding the flow buckets' locks) while runs with flow control are
    ready. Each statement answers the shape it saw, which picks the next claim's; a
    wrong guess costs one short statement, only when the shape changes."""
    shape = shapes.get(key)
    if shape == _ONE_HEAD:
        rows = await _fetch(conn, SQL.claim_one_head, *arguments)
        heads = rows[0]["heads"]
        if heads < 2:
            return _leased(rows)
        shape = heads
    if shape == _MANY_HEADS:
        plain = await _fetch(
            conn, SQL.claim, *arguments, shares.passes, shares.weights, shares.seed()
        )
        if not plain[0]["limited"]:
            shapes.remember(key, plain[0])
            return _leased(plain)
        # Runs with flow control are ready: the plain claim leased nothing.
    rows = await _claim_limited(conn, arguments, shares)
    shapes.remember(key, rows[0])
    return _leased(rows)


def _leased(rows: list[asyncpg.Record]) -> list[asyncpg.Record]:
    return [row for row in rows if row["id"] is not None]


async def _claim_limited(
    conn: Connection, arguments: tuple[Any, ...], shares: fairness.PriorityShares
) -> list[asyncpg.Record]:
    """The claim with the flow buckets of the ready limited runs locked (``lock_flow``)
    in its transaction: the claim statement that follows sees every lease and rate
    window committed by an earlier holder, so concurrency and rate limits hold exactly
    across claimers and dispatcher replicas. Keys with a strategy other than Wait have
    it applied first (``flow_strategies``), under the same locks."""
    queues, _, _, now, _, tenant = arguments
    async with conn.transaction():
        if not getattr(conn, "generic_plans", False):
            await conn.execute(SQL.generic_plan)
        flow = await conn.fetchrow(SQL.lock_flow, queues, tenant)
        if flow["queues"]:
            await conn.execute(
                SQL.flow_strategies,
                flow["queues"],
                flow["priorities"],
                flow["tenants"],
                flow["jobs"],
                flow["keys"],
                flow["limits"],
                flow["strategies"],
                now,
            )
        rows: list[asyncpg.Record] = await conn.fetch(
            SQL.claim_limited,
            *arguments,
            shares.passes,
            shares.weights,
            shares.seed(),
            flow["buckets"] or [],
        )
    return rows


async def _fetch(conn: Connection, query: str, *arguments: Any) -> list[asyncpg.Record]:
    if getattr(conn, "generic_plans", False):
        # A ClaimConnection plans generically already: one statement, one round trip.
        rows: list[asyncpg.Record] = await conn.fetch(query, *arguments)
        return rows
    async with conn.transaction():
        # The claim's plan is the same for every argument (index scans throughout),
        # but PostgreSQL kept planning it anew: 2-7 ms each time against under a
        # millisecond to run it (see database.ClaimConnection).
        await conn.execute(SQL.generic_plan)
        rows = await conn.fetch(query, *arguments)
    return rows


async def heartbeat(
    conn: Connection,
    shard: int,
    beats: Sequence[Beat],
    now: datetime | None = None,
    scope: Scope = UNRESTRICTED,
) -> list[Extended | TickworkError]:
    """Extend leases; one result per beat, in order (``StaleLease``/``NotFound`` items)."""
    found: dict[tuple[int, int], Extended] = {}
    # One statement per distinct extension (workers use one value, so usually one).
    by_extension: dict[float, list[Beat]] = {}
    for beat in beats:
        seconds = min(
            max(beat.extend_seconds, float(limits.MIN_LEASE_SECONDS)), limits.MAX_EXTENSION_SECONDS
        )
        by_extension.setdefault(seconds, []).append(beat)
    async with conn.transaction():
        for seconds, group in by_extension.items():
            rows = []
            for batch in _rounds(group):
                rows += await conn.fetch(
                    SQL.heartbeat,
                    [b.id for b in batch],
                    [b.fencing_token for b in batch],
                    seconds,
                    now,
                    scope.tenant,
                    scope.queue_list,
                )
            for row in rows:
                found[(row["id"], row["fencing_token"])] = Extended(
                    row["id"], row["lease_expires_at"], row["cancel_requested"]
                )
        results: list[Extended | TickworkError] = []
        for beat in beats:
            hit = found.get((beat.id, beat.fencing_token))
            results.append(hit if hit is not None else await _refusal(conn, shard, beat.id, scope))
    return results


async def complete(
    conn: Connection,
    shard: int,
    completions: Sequence[Completion],
    now: datetime | None = None,
    rng: random.Random | None = None,
    scope: Scope = UNRESTRICTED,
) -> list[Completed | TickworkError]:
    """Record outcomes; one result per completion, in order.

    Succeeded runs end in one statement. Failed runs go to ``retry_wait`` with a
    full-jitter backoff, or to ``dead`` when attempts are spent or the error is not
    retryable. Snoozed runs wait in ``retry_wait`` for their delay with their attempt
    given back, up to ``limits.MAX_SNOOZES`` snoozes a run; past that a snooze is a
    failed attempt (``snooze-limit``). A run whose cancel was requested ends
    ``cancelled``. Repeating a completion with the same token answers what the first
    one did.
    """
    found: dict[tuple[int, int], Completed] = {}
    succeeded = [c for c in completions if c.outcome is Outcome.succeeded]
    # Failures and snoozes share a transaction: both lock their runs first.
    failed = [c for c in completions if c.outcome is not Outcome.succeeded]
    for batch in _rounds(succeeded):
        # One statement, its own transaction: the hot path needs no BEGIN/COMMIT.
        rows = await conn.fetch(
            SQL.complete_succeeded,
            [c.id for c in batch],
            [c.fencing_token for c in batch],
            now,
            scope.tenant,
            scope.queue_list,
        )
        _collect(found, rows)
    if failed:
        async with conn.transaction():
            locked: dict[int, asyncpg.Record] = {}
            for batch in _rounds(failed):
                for row in await conn.fetch(
                    SQL.lock_leased,
                    [c.id for c in batch],
                    [c.fencing_token for c in batch],
                    scope.tenant,
                    scope.queue_list,
                ):
                    locked[row["id"]] = row
            by_key = {(c.id, c.fencing_token): c for c in failed}
            failures: list[Failure] = []
            snoozes: list[tuple[int, int, float]] = []  # (id, token, delay)
            for row in locked.values():
                completion = by_key[(row["id"], row["fencing_token"])]
                if completion.outcome is Outcome.failed:
                    failures.append(_worker_failure(row, completion, rng))
                elif row["cancel_requested"] or row["snoozes"] >= limits.MAX_SNOOZES:
                    failures.append(_snooze_refused(row, rng))
                else:
                    snoozes.append((row["id"], row["fencing_token"], completion.delay_seconds))
            if snoozes:
                rows = await conn.fetch(
                    SQL.record_snoozes,
                    [run_id for run_id, _, _ in snoozes],
                    [token for _, token, _ in snoozes],
                    [delay for _, _, delay in snoozes],
                    now,
                )
                _collect(found, rows)
            if failures:
                _collect(found, await record_failures(conn, failures, now))
    results: list[Completed | TickworkError] = []
    for c in completions:
        hit = found.get((c.id, c.fencing_token))
        if hit is None:
            # Not applied now: a repeat of an earlier completion, or refused. Reads only.
            refusal = await _refusal(conn, shard, c.id, scope)
            earlier = (
                None
                if isinstance(refusal, NotFound)
                else await _earlier_completion(conn, c.id, c.fencing_token)
            )
            results.append(earlier if earlier is not None else refusal)
        else:
            results.append(hit)
    return results


_Item = TypeVar("_Item", Beat, Completion)


def _rounds(items: Sequence[_Item]) -> list[list[_Item]]:
    """Split items so no run id repeats within a round: the SQL pairs each run with the
    token at its id's first position, so a repeated id (a stale and a current token of
    one run in one batch) goes to a later statement."""
    rounds: list[list[_Item]] = []
    seen: dict[int, int] = {}
    for item in items:
        index = seen.get(item.id, 0)
        seen[item.id] = index + 1
        if index == len(rounds):
            rounds.append([])
        rounds[index].append(item)
    return rounds


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt of a locked leased run and what it leads to."""

    id: int
    decision: retry.Decision
    error: dict[str, Any] | None
    outcome: str  # the attempt's outcome: failed, lease-expired


def failure(
    row: asyncpg.Record,
    error: dict[str, Any],
    retryable: bool,
    outcome: str,
    rng: random.Random | None,
) -> Failure:
    """The retry decision for a leased run ``row`` (read by ``lock_leased`` or the
    reaper's lock) whose attempt failed."""
    decision = retry.decide(
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        retry_base=row["retry_base"],
        retry_max=row["retry_max"],
        retryable=retryable,
        cancel_requested=row["cancel_requested"],
        rng=rng,
    )
    return Failure(row["id"], decision, error, outcome)


def _worker_failure(
    row: asyncpg.Record, completion: Completion, rng: random.Random | None
) -> Failure:
    error = dict(completion.error or {"message": "failed"})
    error["retryable"] = completion.retryable
    error["attempt"] = row["attempt"]
    return failure(row, error, completion.retryable, "failed", rng)


# The ``reason`` of the error of a snooze refused: past the limit, it failed the attempt.
SNOOZE_LIMIT: Final = "snooze-limit"


def _snooze_refused(row: asyncpg.Record, rng: random.Random | None) -> Failure:
    """A snooze that cannot be: the run was asked to stop (it ends ``cancelled``), or it
    snoozed ``limits.MAX_SNOOZES`` times already (the attempt counts as failed, and the
    run is retried or dead as after any retryable failure)."""
    if row["cancel_requested"]:
        error = {"message": "snoozed while its cancel was requested", "retryable": True}
    else:
        error = {
            "message": f"snoozed {row['snoozes']} times, the most a run may "
            f"({limits.MAX_SNOOZES}): this snooze counts as a failed attempt",
            "reason": SNOOZE_LIMIT,
            "retryable": True,
        }
    error["attempt"] = row["attempt"]
    return failure(row, error, True, "failed", rng)


async def record_failures(
    conn: Connection, failures: Sequence[Failure], now: datetime | None
) -> list[asyncpg.Record]:
    """Apply the decided outcomes of failed attempts (rows locked by the caller, in its
    transaction). A job whose run ends dead has its definition locked first: its streak
    of dead runs counts it, and ``spec.pauseAfterFailures`` may pause the job in the
    same statement (with its reason and an audit entry)."""
    dead = [f.id for f in failures if f.decision.state is State.dead]
    if dead:
        await conn.execute(SQL.lock_definitions_of_runs, dead)
    rows: list[asyncpg.Record] = await conn.fetch(
        SQL.record_failures,
        [f.id for f in failures],
        [f.decision.state.value for f in failures],
        [f.decision.delay_seconds for f in failures],
        [None if f.error is None else orjson.dumps(f.error).decode() for f in failures],
        [f.outcome for f in failures],
        now,
    )
    return rows


# State(value) looks the member up through the enum machinery: a microsecond a run.
_STATES: Final = {state.value: state for state in State}


def _collect(found: dict[tuple[int, int], Completed], rows: Sequence[asyncpg.Record]) -> None:
    for row in rows:
        found[(row["run_id"], row["fencing_token"])] = Completed(
            row["run_id"],
            _STATES[row["result_state"]],
            row["next_attempt_at"],
            bool(row.get("snoozed", False)),
        )


async def _earlier_completion(
    conn: Connection, run_id: int, fencing_token: int
) -> Completed | None:
    row = await conn.fetchrow(SQL.completion_of, run_id, fencing_token)
    if row is None:
        return None
    return Completed(run_id, State(row["result_state"]), row["next_attempt_at"], row["snoozed"])


async def _refusal(conn: Connection, shard: int, run_id: int, scope: Scope) -> TickworkError:
    public = shards.format_run_id(shard, run_id)
    row = await conn.fetchrow(SQL.run_state, run_id)
    # A run outside the caller's tenant or queues is reported as absent: existence of
    # another team's runs is not the caller's business.
    if row is None or not scope.allows(row["tenant"], row["queue"]):
        return NotFound(f"no run {public!r}", field="runId")
    if row["state"] == State.leased.value:
        return StaleLease(
            f"run {public} is leased with a newer fencing token", field="fencingToken"
        )
    return StaleLease(f"run {public} is {row['state']}: the lease is gone", field="fencingToken")


async def queues_of(conn: Connection, run_ids: Sequence[int], tenant: str) -> frozenset[str]:
    """The queues of the runs among ``run_ids`` that belong to ``tenant``."""
    rows = await conn.fetch(SQL.run_queues, list(run_ids), tenant)
    return frozenset(row["queue"] for row in rows)


async def release(conn: Connection, granted: Sequence[Lease], now: datetime | None = None) -> int:
    """Return leases that never reached a worker to ``ready``, attempt not counted."""
    async with conn.transaction():
        rows = await conn.fetch(
            SQL.release, [g.id for g in granted], [g.fencing_token for g in granted], now
        )
        await notify_ready(conn, [row["queue"] for row in rows])
    return len(rows)
