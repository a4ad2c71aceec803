"""``tickwork dev``'s manifest sync through a database outage: a change made while the
database is away is applied once it is back, and the watch never ends on its own."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from polling import eventually

from faults.conftest import FAST_POOLS, proxied_map
from faults.proxy import TcpProxy
from tickwork.core.errors import NotFound
from tickwork.engine.jobs import Jobs
from tickwork.engine.manifest_sync import ManifestSync
from tickwork.store.database import Database

MANIFEST = """\
apiVersion: tickwork.dev/v1alpha1
kind: ScheduledJob
metadata: {name: report, namespace: acme}
spec:
  schedule: {cron: "0 * * * *"}
"""


async def exists(jobs: Jobs) -> bool:
    try:
        await jobs.get("acme", "report")
    except NotFound:
        return False
    return True


async def test_a_change_made_during_an_outage_is_applied_after_it(
    fault_url: str, proxies: list[TcpProxy], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "tickwork.manifests")
    async with Database(proxied_map(fault_url, proxies), FAST_POOLS) as database:
        jobs = Jobs(database)
        sync = ManifestSync(jobs, tmp_path)
        stop = asyncio.Event()
        watching = asyncio.create_task(sync.watch(stop, retry_seconds=0.1))
        try:
            await asyncio.wait_for(sync.watching.wait(), 5)
            for proxy in proxies:
                proxy.reset()
                proxy.starting_up()
            (tmp_path / "report.yaml").write_text(MANIFEST)
            await eventually(
                lambda: "manifest sync postponed" in caplog.text, what="the sync postponed"
            )
            assert not watching.done()
            for proxy in proxies:
                proxy.heal()
            await eventually(lambda: exists(jobs), within=5, what="the job applied")
            assert not watching.done()
        finally:
            stop.set()
            await asyncio.wait_for(watching, 5)
