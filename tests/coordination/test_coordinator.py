"""Balancing, shedding, shutdown and the writer's deadline, on both backends.

Rounds are driven by hand (``cycle()``), all replicas at once, so the tests follow the
coordination step by step without sleeping; lease time is the shared frozen clock and
the coordinators' own deadline clock is a fake monotonic clock moved with it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from coordination.conftest import Leases
from tickwork.coordination.backend import Backend, Observation
from tickwork.coordination.coordinator import Coordinator, Timing

TIMING = Timing(lease_seconds=10)


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def coordinators(
    leases: Leases, count: int, clock: Monotonic | None = None, prefix: str = "replica"
) -> list[Coordinator]:
    made = []
    for n in range(count):
        backend = await leases.replica()
        made.append(
            Coordinator(
                backend,
                f"{prefix}-{n}",
                leases.shard_count,
                TIMING,
                monotonic=clock or Monotonic(),
            )
        )
    return made


def assert_disjoint(replicas: Sequence[Coordinator]) -> None:
    """No two replicas may write to one shard at any moment."""
    seen: dict[int, str] = {}
    for replica in replicas:
        for shard in replica.owned():
            assert shard not in seen, f"shard {shard}: {seen[shard]} and {replica.identity}"
            seen[shard] = replica.identity


async def rounds(replicas: Sequence[Coordinator], count: int) -> None:
    for _ in range(count):
        await asyncio.gather(*(replica.cycle() for replica in replicas))
        await asyncio.gather(*(replica.shed_settled() for replica in replicas))
        assert_disjoint(replicas)


def balanced(replicas: Sequence[Coordinator], shard_count: int) -> bool:
    aim = math.ceil(shard_count / len(replicas))
    owned = [len(replica.owned()) for replica in replicas]
    return sum(owned) == shard_count and max(owned) <= aim


async def test_eight_contenders_starting_at_once_share_the_shards_one_each(
    leases: Leases,
) -> None:
    replicas = await coordinators(leases, 8)
    for _ in range(8):
        await rounds(replicas, 1)
        if balanced(replicas, leases.shard_count):
            break
    assert [len(r.owned()) for r in replicas] == [1] * 8
    acquired = [r.test_signals for r in replicas]
    # Settled: more rounds change nothing (no flapping).
    before = {r.identity: dict(r.owned()) for r in replicas}
    await rounds(replicas, 4)
    assert {r.identity: dict(r.owned()) for r in replicas} == before
    assert len(acquired) == 8


async def test_a_replica_joining_takes_its_share_from_graceful_sheds(leases: Leases) -> None:
    replicas = await coordinators(leases, 3)
    for replica in replicas:
        replica.test_signals.init()
    await rounds(replicas, 4)
    assert sorted(len(r.owned()) for r in replicas) == [2, 3, 3]
    for replica in replicas:
        # Starting together, a replica may not see the others in its first round and
        # take more than its share, shedding it later: not what this test is about.
        replica.test_signals.released.drain()
    newcomer = (await coordinators(leases, 1, prefix="newcomer"))[0]
    everyone = [*replicas, newcomer]
    await rounds(everyone, 1)
    assert not newcomer.owned()  # nothing is free, and nothing held is taken
    for _ in range(4):
        await rounds(everyone, 1)
    assert sorted(len(r.owned()) for r in everyone) == [2, 2, 2, 2]
    shed = [reason for r in replicas for _, reason in r.test_signals.released.drain()]
    assert shed == ["shed", "shed"]
    assert not [lost for r in replicas for lost in r.test_signals.lost.drain()]
    before = {r.identity: dict(r.owned()) for r in everyone}
    await rounds(everyone, 4)
    assert {r.identity: dict(r.owned()) for r in everyone} == before


async def test_a_dead_replicas_shards_are_taken_once_its_leases_expire(leases: Leases) -> None:
    clock = Monotonic()
    replicas = await coordinators(leases, 3, clock)
    await rounds(replicas, 4)
    dead, *alive = sorted(replicas, key=lambda r: -len(r.owned()))
    orphans = set(dead.owned())
    await rounds(alive, 1)
    assert not orphans & {s for r in alive for s in r.owned()}
    for _ in range(11):  # the survivors renew every second; the dead replica cannot
        leases.clock.advance(1)
        clock.now += 1
        await rounds(alive, 1)
    await rounds(alive, 2)
    assert sorted(len(r.owned()) for r in alive) == [4, 4]
    assert orphans <= {s for r in alive for s in r.owned()}


async def test_shutdown_releases_every_lease_and_withdraws_the_membership(
    leases: Leases,
) -> None:
    leaving, staying = await coordinators(leases, 2)
    await rounds([leaving, staying], 4)
    assert len(leaving.owned()) == len(staying.owned()) == 4
    stop = asyncio.Event()
    stop.set()
    await leaving.run(stop)  # stopped at once: only the shutdown runs
    seen = await staying.backend.observe(staying.identity, TIMING.lease_seconds)
    assert seen.members == {staying.identity}
    assert all(lease.holder in (None, staying.identity) for lease in seen.leases.values())
    await rounds([staying], 1)  # no lease to wait out
    assert len(staying.owned()) == leases.shard_count


class Unreachable:
    """A backend that stops answering on command."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.name = backend.name
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ConnectionRefusedError("backend unreachable")

    async def observe(self, identity: str, lease_seconds: float) -> Observation:
        self._check()
        return await self.backend.observe(identity, lease_seconds)

    async def hold(self, shard: int, identity: str, lease_seconds: float) -> bool:
        self._check()
        return await self.backend.hold(shard, identity, lease_seconds)

    async def release(self, shard: int, identity: str) -> None:
        self._check()
        await self.backend.release(shard, identity)

    async def leave(self, identity: str) -> None:
        self._check()
        await self.backend.leave(identity)

    async def close(self) -> None:
        await self.backend.close()


async def test_a_replica_that_cannot_renew_stops_writing_before_its_lease_expires(
    leases: Leases,
) -> None:
    clock = Monotonic()
    link = Unreachable(await leases.replica())
    cut_off = Coordinator(link, "cut-off", leases.shard_count, TIMING, monotonic=clock)
    other = (await coordinators(leases, 1, clock, prefix="other"))[0]
    await rounds([cut_off], 2)
    assert len(cut_off.owned()) == leases.shard_count
    link.down = True
    step = 0.25
    while cut_off.owned():
        clock.now += step
        leases.clock.advance(step)
        await cut_off.cycle()
        # Whenever it still believes it may write, nobody else can take its shards.
        assert not await other.backend.hold(0, other.identity, TIMING.lease_seconds)
    # It stopped at least the skew margin before the lease expired for the others.
    seen = await other.backend.observe(other.identity, TIMING.lease_seconds)
    remaining = seen.leases[0].remaining
    assert remaining is not None and remaining >= TIMING.skew - step
    link.down = False
    leases.clock.advance(remaining + 0.01)
    clock.now += remaining + 0.01
    await rounds([other], 1)
    assert other.owned()
    await rounds([cut_off, other], 2)
    assert_disjoint([cut_off, other])
