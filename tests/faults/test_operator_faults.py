"""The operator while the store is away: objects say StoreUnavailable, a deleted object
waits on its finalizer (never orphaned), /readyz says so, and everything completes by
itself once the store is back."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from kube import emulator
from scheduledjobs.conftest import condition, example, observed

from faults.conftest import FAST_POOLS, operating, proxied_map
from faults.proxy import TcpProxy
from tickwork.core.errors import NotFound
from tickwork.store.database import Database

pytestmark = pytest.mark.timeout(60)


def unavailable(obj: dict[str, object] | None) -> bool:
    found = condition(obj)  # type: ignore[arg-type]
    return found is not None and found["reason"] == "StoreUnavailable"


async def test_an_outage_is_store_unavailable_and_a_delete_waits_for_the_store(
    kube: emulator.Emulator, fault_url: str, proxies: list[TcpProxy], tmp_path: Path
) -> None:
    async with (
        Database(proxied_map(fault_url, proxies), FAST_POOLS) as database,
        operating(database, kube) as operator,
    ):
        await kube.create(example("hello"))
        await kube.wait_for("sj", "hello", observed(1), namespace="default")

        for proxy in proxies:  # PostgreSQL restarting: every link cut, no new one
            proxy.starting_up()
            proxy.reset()
        assert operator.health is not None
        async with httpx.AsyncClient(base_url=operator.health.url, timeout=10) as http:
            ready = await http.get("/readyz")
        assert ready.status_code == 503 and "unreachable" in ready.json()["detail"]

        await kube.delete("sj", "hello", namespace="default")
        held = await kube.wait_for("sj", "hello", unavailable, namespace="default")
        assert held is not None  # not orphaned: the finalizer holds it
        assert held["metadata"]["deletionTimestamp"]
        assert held["metadata"]["finalizers"] == ["tickwork.dev/finalizer"]
        await kube.create(example("nightly-report"))
        created = await kube.wait_for("sj", "nightly-report", unavailable, namespace="default")
        assert "the job store cannot be reached" in condition(created)["message"]  # type: ignore[arg-type,index]

        for proxy in proxies:
            proxy.heal()
        await kube.wait_for("sj", "hello", lambda o: o is None, namespace="default", timeout=10)
        await kube.wait_for("sj", "nightly-report", observed(1), namespace="default", timeout=10)
        with pytest.raises(NotFound):
            await operator.jobs.get("default", "hello")
        assert (await operator.jobs.get("default", "nightly-report")).definition is not None
