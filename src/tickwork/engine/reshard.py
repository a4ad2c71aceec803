"""Doubling the shard count in a maintenance window (``tickwork reshard --to 2S``).

The shard of a job is ``H(tenant/name) mod S``; with 2S shards it is ``H mod 2S``,
which is either ``H mod S`` or that plus S. So shard k splits: a job on it stays on k
or moves to the new shard k + S, and nothing moves between old shards. A reshard:

1. refuses to start while any tickwork role is connected to a shard (their
   ``application_name``) or a scheduler holds a shard lease or a live membership in
   the shards' tables (the ``postgres`` backend; the command checks Kubernetes Leases
   itself, since the engine does not talk to Kubernetes);
2. prepares: migrates each new shard k + S (a shard of 2S), makes its sequences (run
   ids, fencing tokens, audit ids) start above shard k's, takes shard k's scheduler
   epoch (so a scheduler that did not stop writes nothing more), and records the
   reshard in both journals. From then on every role refuses both shards until the
   reshard is over: the source says it is a shard of 2S and that it is moving;
3. moves each job of k whose shard is now k + S, one at a time: its rows are copied
   to k + S in k + S's transaction, then forgotten on k in k's, which leaves a
   forwarding row per run (``moved_runs``) and counts the move in the journal. The
   job's definition (with ``next_due_at``, the materialiser's cursor), its live runs
   (leased ones with their fencing token and lease), finished runs, attempts, run keys
   (the unique ``(tenant, job, due_at)`` of cron runs and the idempotency keys), audit
   entries and change mark all go, so a cron fire time is never materialised twice;
   then the enqueue rate buckets of the tenants whose bucket shard is now k + S;
4. finishes: both journals say done (the shard 0 source last).

Every step may be repeated: a killed reshard is finished by running it again. A job
copied but not yet forgotten is copied again (the copy first clears what an earlier
one left), and a forgotten job is not on the source any more, so no job is lost or
doubled. A run keeps its number: ``r{k}-{n}`` resolves through shard k's forwarding
row, and the run now answers as ``r{k+S}-{n}`` (``engine.jobs``).

This module decides the steps and their order; each step's transaction, with its
statements, is the store's (``store.reshard``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import asyncpg

from tickwork.core import hashing
from tickwork.core.clock import Clock, DatabaseClock
from tickwork.core.shards import Shard, ShardMap
from tickwork.core.testsignal import Signals, TestSignal
from tickwork.store import database, epochs, migrate, notifications, reshard, shard_leases
from tickwork.store.database import Connection

logger = logging.getLogger(__name__)

APPLICATION_NAME: Final = "tickwork-reshard"
EPOCH_OWNER: Final = "tickwork-reshard"
PROGRESS_EVERY: Final = 1000


class ReshardError(Exception):
    """The reshard cannot go on as asked (the message says why and what to do)."""


class Refused(ReshardError):
    """Something still works on the shards: the reshard waits for a maintenance window."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("; ".join(reasons))


@dataclass(frozen=True, slots=True)
class State:
    """Where the installation stands: ``from_count`` shards today, asked to go to
    ``to_count``; ``resuming`` when an earlier run of this reshard did not finish,
    ``done`` when it finished already."""

    from_count: int
    to_count: int
    resuming: bool = False
    done: bool = False


@dataclass
class ShardMoves:
    """What one source shard moves (planned, or moved so far)."""

    shard: int
    to: int
    jobs_seen: int = 0
    jobs: int = 0
    definitions: int = 0
    live_runs: int = 0
    finished_runs: int = 0
    buckets: int = 0

    @property
    def staying(self) -> int:
        return self.jobs_seen - self.jobs


@dataclass
class Report:
    state: State
    shards: list[ShardMoves] = field(default_factory=list)

    @property
    def jobs(self) -> int:
        return sum(s.jobs for s in self.shards)

    @property
    def runs(self) -> int:
        return sum(s.live_runs + s.finished_runs for s in self.shards)


@dataclass
class ReshardSignals(Signals):
    """Test signals: a job copied to its new shard and not yet forgotten on its source
    (``(shard, tenant, job)``), and a job moved (the same)."""

    copied: TestSignal[tuple[int, str, str]]
    moved: TestSignal[tuple[int, str, str]]

    @classmethod
    def create(cls) -> ReshardSignals:
        return cls(TestSignal("job copied"), TestSignal("job moved"))


class Resharder:
    """Doubles the shards of an installation whose shards AFTER the reshard are
    ``after`` (its first half are the shards there are today, in order)."""

    def __init__(
        self,
        after: ShardMap,
        *,
        clock: Clock | None = None,
        progress_every: int = PROGRESS_EVERY,
        connect_timeout: float = 10.0,
    ) -> None:
        if after.count % 2:
            raise ReshardError(f"{after.count} shards cannot be half old and half new")
        self.after = after
        self.from_count = after.count // 2
        self.to_count = after.count
        self.clock = clock or DatabaseClock()
        self.progress_every = progress_every
        self.connect_timeout = connect_timeout
        self.test_signals = ReshardSignals.create()

    # --- where things stand ---

    async def state(self) -> State:
        """The reshard asked for, checked against what shard 0 says; ``ReshardError``
        when it is not a doubling of the shards there are."""
        async with self._connected(self.after[0]) as conn:
            found = await reshard.identity(conn)
            try:
                entries = await reshard.journal(conn)
            except asyncpg.UndefinedTableError:
                entries = None
        if found is None:
            raise ReshardError("shard 0 is not a migrated tickwork shard: check --database-url")
        if entries is None:
            raise ReshardError(
                "shard 0 is not at the latest schema version: run `tickwork migrate` first"
            )
        shard, count = found
        if shard != 0:
            raise ReshardError(
                f"the first database URL holds shard {shard}, not shard 0: give the shards "
                "in order, the existing ones first"
            )
        for entry in entries:
            if entry.phase == "moving" and entry.role == "source":
                if entry.to_count != self.to_count:
                    raise ReshardError(
                        f"a reshard from {entry.from_count} to {entry.to_count} shards has "
                        f"not finished: run it again with --to {entry.to_count}"
                    )
                return State(entry.from_count, entry.to_count, resuming=True)
        if count == self.to_count and any(
            e.to_count == count and e.phase == "done" for e in entries
        ):
            return State(count // 2, count, done=True)
        if count * 2 != self.to_count:
            raise ReshardError(
                f"the installation has {count} shards: a reshard doubles them, to "
                f"{count * 2} (--to {count * 2} and {count * 2} shards of database URLs)"
            )
        return State(count, self.to_count)

    async def refusals(self) -> list[str]:
        """Why the reshard may not run now: roles connected to a shard, scheduler
        leases or members in the shards' tables (nothing: go ahead)."""
        names = [database.application_name(n) for n in range(self.to_count)]
        reasons: list[str] = []
        sessions: dict[tuple[str, int], reshard.Session] = {}
        for shard in self._sources():
            async with self._connected(shard) as conn:
                for session in await reshard.other_sessions(conn, names):
                    sessions[(shard.dsn, session.pid)] = session
                try:
                    lease = await shard_leases.read(conn, self.clock.now())
                    members = await shard_leases.members(conn, self.clock.now())
                except asyncpg.UndefinedTableError:
                    raise ReshardError(
                        f"shard {shard.number} is not at the latest schema: run "
                        "`tickwork migrate` first"
                    ) from None
                if lease.holder is not None and (lease.remaining or 0) > 0:
                    reasons.append(
                        f"shard {shard.number} is leased by scheduler {lease.holder!r} "
                        f"for {lease.remaining:.0f}s more"
                    )
                for member in sorted(members):
                    reasons.append(f"scheduler {member!r} is live (shard {shard.number})")
        for session in sessions.values():
            where = f" from {session.client}" if session.client else ""
            reasons.append(
                f"a tickwork role is connected to the shards ({session.application_name}, "
                f"pid {session.pid}{where})"
            )
        return list(dict.fromkeys(reasons))

    # --- the reshard ---

    async def plan(self) -> Report:
        """What would move (the dry run): every job of each source shard, counted."""
        state = await self.state()
        report = Report(state)
        if state.done:
            return report
        for number in range(self.from_count):
            moves = ShardMoves(number, number + self.from_count)
            report.shards.append(moves)
            async with self._connected(self.after[number]) as conn:
                async for tenant, job in self._jobs(conn):
                    moves.jobs_seen += 1
                    if self._moves(tenant, job):
                        size = await reshard.job_size(conn, tenant, job)
                        self._count(moves, size)
                for bucket in await reshard.buckets(conn):
                    moves.buckets += self._bucket_moves(bucket.tenant)
        return report

    async def run(self) -> Report:
        """Reshard (or finish a reshard cut short); ``Refused`` while anything still
        works on the shards."""
        state = await self.state()
        report = Report(state)
        if state.done:
            logger.info("the installation has %d shards already", state.to_count)
            return report
        refusals = await self.refusals()
        if refusals:
            raise Refused(refusals)
        logger.info(
            "%s the reshard from %d to %d shards",
            "resuming" if state.resuming else "starting",
            self.from_count,
            self.to_count,
            extra={"action": "reshard-start"},
        )
        for number in range(self.from_count):
            await self._prepare(number)
        report.shards = list(
            await asyncio.gather(*(self._move_shard(n) for n in range(self.from_count)))
        )
        for number in reversed(range(self.from_count)):
            await self._finish(number)
        logger.info(
            "resharded from %d to %d shards: %d jobs and %d runs moved",
            self.from_count,
            self.to_count,
            report.jobs,
            report.runs,
            extra={"action": "reshard-done"},
        )
        return report

    async def _prepare(self, number: int) -> None:
        source, target = self._pair(number)
        async with self._connected(source) as src:
            found = await reshard.identity(src)
            counts = (self.from_count, self.to_count)
            if found is None or found[0] != number or found[1] not in counts:
                raise ReshardError(
                    f"the database URL of shard {number} holds "
                    f"{'no tickwork shard' if found is None else f'shard {found[0]}'}: "
                    "give the shards in order, the existing ones first"
                )
            ids = await reshard.next_ids(src)
        conn = await self._connect(target)
        try:
            applied = await migrate.migrate_shard(conn, target, self.to_count)
            if applied:
                logger.info(
                    "shard %d: created for the reshard (schema version %d)",
                    target.number,
                    migrate.latest_version(),
                    extra={"action": "reshard-prepare", "shard": target.number},
                )
            raised = await reshard.prepare_target(
                conn, ids, self.from_count, self.to_count, self._now()
            )
        except BaseException:
            conn.terminate()  # the server rolls back now, whatever the link's state
            raise
        await conn.close()
        async with self._connected(source) as src:
            if await reshard.in_progress(src) is None:
                # A scheduler that did not stop is deposed here: its writes are refused,
                # and no scheduler takes the shard again until the reshard is done.
                await epochs.take(src, EPOCH_OWNER, self._now())
            await reshard.begin_split(src, self.from_count, self.to_count, self._now())
        logger.info(
            "shard %d splits into %d and %d; new ids on %d start at run %d, fencing token %d",
            number,
            number,
            target.number,
            target.number,
            raised.run_ids,
            raised.fencing_tokens,
            extra={"action": "reshard-prepare", "shard": number},
        )

    async def _move_shard(self, number: int) -> ShardMoves:
        source, target = self._pair(number)
        moves = ShardMoves(number, target.number)
        async with self._connected(source) as src, self._connected(target) as dst:
            await _cut_when_cancelled(self._move_rows(src, dst, number, moves), src, dst)
        self._progress(moves, final=True)
        return moves

    async def _move_rows(
        self, src: Connection, dst: Connection, number: int, moves: ShardMoves
    ) -> None:
        # First: the new shard's claims must skip a paused queue from its first run.
        await reshard.copy_paused_queues(src, dst)
        # And name a notification's target from its own copy (leases.sql).
        await notifications.copy_all(src, dst)
        async for tenant, job in self._jobs(src):
            moves.jobs_seen += 1
            if self._moves(tenant, job):
                size = await self._move_job(src, dst, number, tenant, job)
                self._count(moves, size)
            if moves.jobs_seen % self.progress_every == 0:
                self._progress(moves)
        for bucket in await reshard.buckets(src):
            if self._bucket_moves(bucket.tenant):
                await reshard.put_bucket(dst, bucket)
                await reshard.forget_bucket(src, bucket.tenant)
                moves.buckets += 1

    async def _move_job(
        self, src: Connection, dst: Connection, number: int, tenant: str, job: str
    ) -> reshard.JobSize:
        size = await reshard.move_job(
            src,
            dst,
            tenant,
            job,
            to_shard=number + self.from_count,
            from_count=self.from_count,
            to_count=self.to_count,
            now=self._now(),
            copied=lambda: self.test_signals.copied.signal((number, tenant, job)),
        )
        self.test_signals.moved.signal((number, tenant, job))
        return size

    async def _finish(self, number: int) -> None:
        source, target = self._pair(number)
        async with self._connected(target) as dst:
            await reshard.finish(dst, self.from_count, self.to_count, self._now())
        async with self._connected(source) as src:
            await reshard.finish(src, self.from_count, self.to_count, self._now())

    # --- pieces ---

    def _moves(self, tenant: str, job: str) -> bool:
        return hashing.shard_of(tenant, job, self.to_count) >= self.from_count

    def _bucket_moves(self, tenant: str) -> bool:
        # A tenant's enqueue bucket lives on the shard of ``tenant/`` (engine.quotas).
        return self._moves(tenant, "")

    def _sources(self) -> list[Shard]:
        return [self.after[n] for n in range(self.from_count)]

    def _pair(self, number: int) -> tuple[Shard, Shard]:
        return self.after[number], self.after[number + self.from_count]

    def _now(self) -> datetime | None:
        return self.clock.now()

    @staticmethod
    def _count(moves: ShardMoves, size: reshard.JobSize) -> None:
        moves.jobs += 1
        moves.definitions += size.definitions
        moves.live_runs += size.live_runs
        moves.finished_runs += size.finished_runs

    def _progress(self, moves: ShardMoves, *, final: bool = False) -> None:
        logger.info(
            "shard %d: %s %d jobs seen, %d moved to shard %d (%d live and %d finished runs), "
            "%d stay; %d enqueue buckets moved",
            moves.shard,
            "done:" if final else "so far",
            moves.jobs_seen,
            moves.jobs,
            moves.to,
            moves.live_runs,
            moves.finished_runs,
            moves.staying,
            moves.buckets,
            extra={"action": "reshard-progress", "shard": moves.shard},
        )

    async def _jobs(self, conn: Connection) -> AsyncIterator[tuple[str, str]]:
        after = ("", "")
        while True:
            found = await reshard.next_job(conn, after)
            if found is None:
                return
            yield found
            after = found

    @contextlib.asynccontextmanager
    async def _connected(self, shard: Shard) -> AsyncIterator[Connection]:
        conn = await self._connect(shard)
        try:
            yield conn
        except BaseException:
            conn.terminate()  # the server rolls back now, whatever the link's state
            raise
        await conn.close()

    async def _connect(self, shard: Shard) -> asyncpg.Connection:
        try:
            return await database.connect(shard, self.connect_timeout, name=APPLICATION_NAME)
        except (OSError, TimeoutError, asyncpg.PostgresError) as error:
            raise ReshardError(
                f"cannot connect to the database of shard {shard.number}: {error}"
            ) from error


async def _cut_when_cancelled(work: Awaitable[None], *conns: asyncpg.Connection) -> None:
    """Await ``work`` on ``conns``; cancelled, cut the connections before the work
    unwinds, as a crash would. Cancelled in a statement, asyncpg asks the server to
    cancel it and waits for the answer; a statement that ended just before the request
    arrived never answers, so the work's rollback would wait, its session idle in a
    transaction and holding the job's locks, until the server's
    idle_in_transaction_session_timeout ends it a minute later; a reshard run again
    at once would wait as long. Cut, the server rolls back at once, and a move may be
    cut anywhere (``store.reshard.move_job``)."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        for conn in conns:
            conn.terminate()
        with contextlib.suppress(Exception):
            await task
        raise
