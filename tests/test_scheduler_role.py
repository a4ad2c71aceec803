"""``tickwork scheduler`` and ``tickwork dev`` build their scheduler through one
function (``cli.scheduling.scheduler_role``), from a ``SchedulerSettings``: dev runs the
scheduler production runs (its shard observer, its defaults, the notification
deliveries), not a smaller one built by hand."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tickwork.cli import cli, scheduling
from tickwork.coordination.coordinator import Coordinator
from tickwork.coordination.ownership import Fixed, Ownership
from tickwork.core.settings import SchedulerSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.engine.observer import ShardObserver
from tickwork.store.database import Database


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[tuple[SchedulerSettings, Ownership]]:
    """Every scheduler the CLI builds, by the one function; its loops end at once, so
    the command stops as it would on SIGTERM."""
    made: list[tuple[SchedulerSettings, Ownership]] = []
    real = scheduling.scheduler_role

    @contextlib.asynccontextmanager
    async def recording(
        engine: Installation, settings: SchedulerSettings, **given: Any
    ) -> AsyncIterator[scheduling.SchedulerRole]:
        made.append((settings, given["ownership"]))
        async with real(engine, settings, **given) as role:

            async def done(stop: asyncio.Event) -> None:
                return None

            yield scheduling.SchedulerRole(role.scheduler, (done,))

    monkeypatch.setattr(scheduling, "scheduler_role", recording)
    return made


def test_the_scheduler_command_builds_it_from_its_options(
    database_url: str, built: list[tuple[SchedulerSettings, Ownership]]
) -> None:
    result = CliRunner().invoke(
        cli,
        [
            *("scheduler", "--database-url", database_url, "--coordination", "postgres"),
            *("--health-port", "-1", "--interval", "0.5", "--retention-days", "9"),
        ],
    )
    assert result.exit_code == 0, result.output
    [(settings, _)] = built
    assert (settings.interval, settings.retention_days) == (0.5, 9)


def test_dev_builds_the_same_scheduler_with_the_defaults(
    database_url: str, tmp_path: Path, built: list[tuple[SchedulerSettings, Ownership]]
) -> None:
    result = CliRunner().invoke(
        cli,
        ["dev", "--database-url", database_url, "--port", "0", "--data-dir", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    [(settings, ownership)] = built
    assert settings == SchedulerSettings()
    # Shards shared through leases with other dev processes, as production shares them.
    assert isinstance(ownership, Coordinator) and ownership.backend.name == "postgres"


async def test_the_role_has_the_shard_observer_and_delivers_notifications(
    database: Database,
) -> None:
    engine = Installation.over(database)
    settings = SchedulerSettings(observe_interval=7)
    role = scheduling.scheduler_role(
        engine, settings, ownership=Fixed(range(database.shard_count)), metrics=Metrics()
    )
    async with role as made:
        scheduler = made.scheduler
        assert scheduler.settings is settings
        assert isinstance(scheduler.observer, ShardObserver)
        assert scheduler.observer.interval.total_seconds() == 7
        # The passes over the shards, and the notification deliveries.
        assert len(made.loops) == 2 and made.loops[0] == scheduler.run
