"""The coordination backend contract: every test runs on PostgreSQL and on the
emulated Kubernetes API (see ``conftest.py``)."""

from __future__ import annotations

import asyncio

import pytest

from coordination.conftest import Leases

LEASE = 10.0


async def test_a_free_lease_is_taken_and_only_its_holder_renews_it(leases: Leases) -> None:
    a, b = await leases.replica(), await leases.replica()
    assert await a.hold(0, "a", LEASE)
    assert not await b.hold(0, "b", LEASE)
    leases.clock.advance(LEASE - 1)
    assert await a.hold(0, "a", LEASE)  # renewed: runs another LEASE from now
    leases.clock.advance(LEASE - 1)
    assert not await b.hold(0, "b", LEASE)
    assert await b.hold(1, "b", LEASE)  # another shard is another lease


async def test_observe_reports_holders_remaining_time_and_members(leases: Leases) -> None:
    a, b = await leases.replica(), await leases.replica()
    assert await a.hold(3, "a", LEASE)
    seen = await b.observe("b", LEASE)
    assert seen.members == {"b"}  # a never announced itself: it holds, it is not a member
    assert seen.unreachable == frozenset()
    lease = seen.leases[3]
    assert lease.holder == "a"
    assert lease.remaining == pytest.approx(LEASE, abs=0.01)
    assert not lease.takeable_by("b") and lease.takeable_by("a")
    others = [s for s, state in seen.leases.items() if s != 3]
    assert all(seen.leases[s].holder is None for s in others)
    assert (await a.observe("a", LEASE)).members == {"a", "b"}
    leases.clock.advance(4)
    assert (await b.observe("b", LEASE)).leases[3].remaining == pytest.approx(LEASE - 4, abs=0.01)


async def test_an_expired_lease_is_taken_over_and_its_old_holder_cannot_renew_it(
    leases: Leases,
) -> None:
    a, b = await leases.replica(), await leases.replica()
    assert await a.hold(2, "a", LEASE)
    before = (await b.observe("b", LEASE)).leases[2].transitions
    leases.clock.advance(LEASE - 0.01)
    assert not await b.hold(2, "b", LEASE)  # not yet
    leases.clock.advance(0.02)
    assert await b.hold(2, "b", LEASE)
    assert not await a.hold(2, "a", LEASE)  # too late: it is b's now
    after = (await a.observe("a", LEASE)).leases[2]
    assert after.holder == "b" and after.transitions == before + 1
    assert await b.hold(2, "b", LEASE)  # renewing one's own lease is no transition
    assert (await a.observe("a", LEASE)).leases[2].transitions == before + 1


async def test_a_released_lease_is_free_at_once_and_a_stranger_cannot_release(
    leases: Leases,
) -> None:
    a, b = await leases.replica(), await leases.replica()
    assert await a.hold(5, "a", LEASE)
    await b.release(5, "b")  # not b's: nothing happens
    assert not await b.hold(5, "b", LEASE)
    await a.release(5, "a")
    seen = await b.observe("b", LEASE)
    assert seen.leases[5].holder is None and seen.leases[5].takeable_by("b")
    assert await b.hold(5, "b", LEASE)  # no waiting out the lease


async def test_members_expire_unless_they_announce_and_leave_at_once(leases: Leases) -> None:
    a, b, c = await leases.replica(), await leases.replica(), await leases.replica()
    await a.observe("a", LEASE)
    await b.observe("b", LEASE)
    assert (await c.observe("c", LEASE)).members == {"a", "b", "c"}  # none holds a shard
    leases.clock.advance(LEASE / 2)
    await a.observe("a", LEASE)
    leases.clock.advance(LEASE / 2 + 0.01)
    assert (await c.observe("c", LEASE)).members == {"a", "c"}  # b stopped announcing
    await a.leave("a")
    assert (await c.observe("c", LEASE)).members == {"c"}


async def test_eight_contenders_racing_for_one_lease_one_wins(leases: Leases) -> None:
    contenders = [await leases.replica() for _ in range(8)]
    for _ in range(3):  # a free lease, an expired one, a released one
        won = await asyncio.gather(
            *(backend.hold(7, f"c{n}", LEASE) for n, backend in enumerate(contenders))
        )
        assert sum(won) == 1, won
        winner = f"c{won.index(True)}"
        assert (await contenders[0].observe("probe", LEASE)).leases[7].holder == winner
        leases.clock.advance(LEASE + 0.01)
        if won.index(True) % 2:
            await contenders[won.index(True)].release(7, winner)
    if leases.kube is not None:
        # The losers lost to a real optimistic-concurrency conflict, never a blind write.
        conflicts = [r for r in leases.kube.audit if r.resource == "leases" and r.code == 409]
        assert conflicts


async def test_every_shard_lease_is_independent(leases: Leases) -> None:
    replicas = [await leases.replica() for _ in range(leases.shard_count)]
    won = await asyncio.gather(
        *(backend.hold(n, f"r{n}", LEASE) for n, backend in enumerate(replicas))
    )
    assert all(won)
    seen = await replicas[0].observe("r0", LEASE)
    assert {shard: lease.holder for shard, lease in seen.leases.items()} == {
        n: f"r{n}" for n in range(leases.shard_count)
    }
