"""``tickwork dev --manifests``: the folder of ScheduledJob YAML is the truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickwork.cli.dev import ManifestSync
from tickwork.core.clock import FrozenClock
from tickwork.core.errors import NotFound
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.store.database import Database

HOURLY = """\
apiVersion: tickwork.dev/v1
kind: ScheduledJob
metadata: {name: report, namespace: acme}
spec:
  schedule: {cron: "0 * * * *"}
  queue: reports
"""


async def test_files_create_update_and_delete_jobs(
    database: Database, clock: FrozenClock, tmp_path: Path
) -> None:
    jobs = Jobs(database, clock)
    sync = ManifestSync(jobs, tmp_path)
    (tmp_path / "report.yaml").write_text(HOURLY)
    await sync.sync()
    view = await jobs.get("acme", "report")
    assert view.definition.spec.queue == "reports"
    assert sync.queues == ["default", "reports"]

    (tmp_path / "report.yaml").write_text(HOURLY.replace("0 * * * *", "30 * * * *"))
    await sync.sync()
    view = await jobs.get("acme", "report")
    assert view.definition.spec.schedule is not None
    assert view.definition.spec.schedule.cron == "30 * * * *"
    generation = view.definition.generation

    await sync.sync()  # nothing changed on disk: nothing written
    assert (await jobs.get("acme", "report")).definition.generation == generation

    run, _ = await jobs.enqueue("acme", "report", EnqueueRequest(), "test")
    (tmp_path / "report.yaml").unlink()
    await sync.sync()
    with pytest.raises(NotFound):
        await jobs.get("acme", "report")
    cancelled, _ = await jobs.run(run.run_id)
    assert cancelled.state.value == "cancelled"  # pending runs cancelled, history kept


async def test_a_broken_file_keeps_the_jobs_it_declared(
    database: Database, clock: FrozenClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = Jobs(database, clock)
    sync = ManifestSync(jobs, tmp_path)
    manifest = tmp_path / "report.yaml"
    manifest.write_text(HOURLY)
    await sync.sync()
    manifest.write_text(HOURLY.replace("0 * * * *", "61 * * * *"))
    await sync.sync()
    assert "schedule.cron" in caplog.text and "61" in caplog.text
    view = await jobs.get("acme", "report")  # still there, unchanged
    assert view.definition.spec.schedule is not None
    assert view.definition.spec.schedule.cron == "0 * * * *"
