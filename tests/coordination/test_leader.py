"""Leader election over one Lease, on the emulated Kubernetes API (real 409s): of two
contenders exactly one leads, and a leader whose renewals hang steps down at its
deadline, before the Lease can have expired for the other. Leases of 1 s: these tests
are about wall-clock deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator

import kubernetes_asyncio
from kube import emulator

from tickwork.coordination.coordinator import Timing
from tickwork.coordination.kubernetes import KubernetesLeases
from tickwork.coordination.leader import OPERATOR_LEASE, LeaderElection

NAMESPACE = "tickwork"
TIMING = Timing(lease_seconds=1.0)  # renew every 0.3 s, 0.1 s of skew margin


@contextlib.asynccontextmanager
async def contender(kube: emulator.Emulator, identity: str) -> AsyncIterator[LeaderElection]:
    assert kube.kubeconfig is not None
    api = await kubernetes_asyncio.config.new_client_from_config(config_file=str(kube.kubeconfig))
    election = LeaderElection(KubernetesLeases(api, NAMESPACE, 0), identity, TIMING)
    election.test_signals.init()
    stop = asyncio.Event()
    running = asyncio.create_task(election.run(stop))
    try:
        yield election
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)
        await api.close()


def lease(kube: emulator.Emulator) -> dict:  # type: ignore[type-arg]
    found = kube.get("leases", OPERATOR_LEASE, NAMESPACE)
    assert found is not None
    return found


async def test_of_two_contenders_exactly_one_leads_and_the_other_keeps_trying(
    kube: emulator.Emulator,
) -> None:
    await kube.create_namespace(NAMESPACE)
    async with contender(kube, "a") as a, contender(kube, "b") as b:
        tried = await asyncio.wait_for(
            asyncio.gather(a.test_signals.tried.wait(), b.test_signals.tried.wait()), 5
        )
        assert sorted(tried) == [False, True]  # the loser got a 409 or saw the winner
        leader, other = (a, b) if a.leading else (b, a)
        for _ in range(5):  # several renewals: still one leader, still the same
            assert await leader.test_signals.tried.wait() is True
            assert (leader.leading, other.leading) == (True, False)
        assert lease(kube)["spec"]["holderIdentity"] == leader.identity
        assert (leader.transitions, other.transitions) == (1, 0)
    # Both stopped: the leader released the Lease.
    assert "holderIdentity" not in lease(kube)["spec"]


async def test_a_leader_whose_renewals_hang_steps_down_before_its_lease_expires(
    kube: emulator.Emulator,
) -> None:
    await kube.create_namespace(NAMESPACE)
    async with contender(kube, "a") as a:
        assert await a.test_signals.changed.wait() == "acquired"
        async with contender(kube, "b") as b:
            assert await b.test_signals.tried.wait() is False
            hung = kube.hang("update", "leases", name=OPERATOR_LEASE, times=None, seconds=5)
            assert await a.test_signals.changed.wait(within=5) == "lost:expired"
            stepped_down = datetime.datetime.now(datetime.UTC)
            spec = lease(kube)["spec"]
            renewed = datetime.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
            expiry = renewed + datetime.timedelta(seconds=spec["leaseDurationSeconds"])
            print(f"stepped down {(expiry - stepped_down).total_seconds():.3f}s before expiry")
            assert stepped_down < expiry
            assert not a.leading and not b.leading
            assert hung.hits > 0
            kube.faults.remove(hung)
            # Once it has expired, one of them takes it again.
            waits = {asyncio.create_task(a.wait_leading()), asyncio.create_task(b.wait_leading())}
            done, pending = await asyncio.wait(waits, timeout=5, return_when="FIRST_COMPLETED")
            for task in pending:
                task.cancel()
            assert done
            assert a.leading != b.leading
            assert datetime.datetime.now(datetime.UTC) >= expiry
