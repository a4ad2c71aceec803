"""``tickwork dev --manifests``: the folder of ScheduledJob YAML is the truth."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tickwork.core.clock import FrozenClock
from tickwork.core.errors import NotFound
from tickwork.core.records import Manager
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.manifest_sync import ManifestSync
from tickwork.store.database import Database

HOURLY = """\
apiVersion: tickwork.dev/v1alpha1
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


def report(cron: str = "0 * * * *", name: str = "report") -> str:
    return HOURLY.replace("0 * * * *", cron).replace("name: report", f"name: {name}")


async def cron_of(jobs: Jobs, name: str = "report") -> str:
    spec = (await jobs.get("acme", name)).definition.spec
    assert spec.schedule is not None
    return spec.schedule.cron


async def test_a_new_file_declaring_an_existing_job_does_not_take_it_over(
    database: Database, clock: FrozenClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = Jobs(database, clock)
    sync = ManifestSync(jobs, tmp_path)
    (tmp_path / "report.yaml").write_text(report("0 * * * *"))
    await sync.sync()
    generation = (await jobs.get("acme", "report")).definition.generation

    # a.yaml sorts first, yet report.yaml declared the job first: it stays the source.
    (tmp_path / "a.yaml").write_text(report("15 * * * *"))
    await sync.sync()
    assert await cron_of(jobs) == "0 * * * *"
    assert (await jobs.get("acme", "report")).definition.generation == generation
    [refusal] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert refusal.startswith(f"manifest refused: {tmp_path / 'a.yaml'}: acme/report")
    assert f"already declared in {tmp_path / 'report.yaml'}" in refusal

    (tmp_path / "report.yaml").write_text(report("30 * * * *"))  # the owner still rules
    await sync.sync()
    assert await cron_of(jobs) == "30 * * * *"

    (tmp_path / "report.yaml").unlink()  # now the other declaration takes over
    await sync.sync()
    assert await cron_of(jobs) == "15 * * * *"


async def test_deleting_a_manifest_takes_effect_while_another_file_is_broken(
    database: Database, clock: FrozenClock, tmp_path: Path
) -> None:
    jobs = Jobs(database, clock)
    sync = ManifestSync(jobs, tmp_path)
    (tmp_path / "report.yaml").write_text(report())
    (tmp_path / "other.yaml").write_text(report(name="other"))
    await sync.sync()

    (tmp_path / "report.yaml").write_text("spec: [unclosed")
    (tmp_path / "other.yaml").unlink()
    await sync.sync()
    with pytest.raises(NotFound):
        await jobs.get("acme", "other")
    assert await cron_of(jobs) == "0 * * * *"  # the broken file's job, kept as it was
    assert sorted(sync.known) == [("acme", "report")]

    (tmp_path / "report.yaml").unlink()  # removing the broken file removes its job
    await sync.sync()
    with pytest.raises(NotFound):
        await jobs.get("acme", "report")


async def test_a_restart_does_not_rewrite_unchanged_jobs(
    database: Database, clock: FrozenClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = Jobs(database, clock)
    (tmp_path / "report.yaml").write_text(report())
    await ManifestSync(jobs, tmp_path).sync()
    before = (await jobs.get("acme", "report")).definition

    caplog.clear()
    with caplog.at_level(logging.INFO):
        await ManifestSync(jobs, tmp_path).sync()  # a new process, the same folder
    assert not [r for r in caplog.records if r.levelno >= logging.INFO], caplog.text
    assert (await jobs.get("acme", "report")).definition == before


async def test_a_restart_removes_the_jobs_of_files_removed_meanwhile_and_only_those(
    database: Database, clock: FrozenClock, tmp_path: Path
) -> None:
    jobs = Jobs(database, clock)
    (tmp_path / "report.yaml").write_text(report())
    (tmp_path / "other.yaml").write_text(report(name="other"))
    await ManifestSync(jobs, tmp_path).sync()
    await jobs.put("acme", "made-by-api", JobSpec(), "api")
    assert (await jobs.get("acme", "other")).definition.managed_by is Manager.manifests

    (tmp_path / "other.yaml").unlink()  # while tickwork dev is stopped
    (tmp_path / "broken.yaml").write_text("spec: [unclosed")
    restarted = ManifestSync(jobs, tmp_path)
    await restarted.sync()  # a broken file could declare it: nothing is removed yet
    assert (await jobs.get("acme", "other")).definition is not None

    (tmp_path / "broken.yaml").unlink()
    await restarted.sync()
    with pytest.raises(NotFound):
        await jobs.get("acme", "other")
    assert await cron_of(jobs) == "0 * * * *"
    assert (await jobs.get("acme", "made-by-api")).definition.managed_by is None


async def test_a_manifest_of_another_api_version_is_refused_saying_which_one_is_served(
    database: Database, clock: FrozenClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = Jobs(database, clock)
    (tmp_path / "old.yaml").write_text(HOURLY.replace("tickwork.dev/v1alpha1", "tickwork.dev/v1"))
    await ManifestSync(jobs, tmp_path).sync()
    assert (
        "apiVersion must be tickwork.dev/v1alpha1 (the version the ScheduledJob CRD "
        "serves), not 'tickwork.dev/v1'"
    ) in caplog.text
    with pytest.raises(NotFound):
        await jobs.get("acme", "report")
