"""A ScheduledJob on a cron macro: admitted, scheduled by the macro's five fields, and
shown as written by kubectl; ``@reboot`` refused by the webhook with what to do."""

from __future__ import annotations

import pytest
from kube import emulator, kubectl
from kube.status import ApiError

from tickwork.engine.jobs import Jobs

from .conftest import OperatorFactory, created, scheduled_job
from .test_kubectl import table


async def test_a_macro_is_admitted_scheduled_and_shown_as_written(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    nightly = scheduled_job("nightly", schedule={"cron": "@daily", "timeZone": "Europe/Berlin"})
    async with operator_for():
        await created(cluster_kube, nightly, admit=True)
        rows = {row["NAME"]: row for row in table(await kubectl.run(cluster_kube, "get", "sj"))}
        # The clock stands at 2026-03-15T01:00Z: the next midnight in Berlin is 23:00Z.
        assert (rows["nightly"]["SCHEDULE"], rows["nightly"]["NEXT"]) == (
            "@daily",
            "2026-03-15T23:00:00Z",
        )
        stored = (await jobs.get("default", "nightly")).definition.spec
        assert stored.to_document()["schedule"]["cron"] == "@daily"

        with pytest.raises(ApiError) as raised:
            await cluster_kube.create(
                scheduled_job("on-boot", schedule={"cron": "@reboot"}), admit=True
            )
    assert 400 <= raised.value.code < 500
    assert (
        "denied the request: spec.schedule.cron: cron expression '@reboot': tickwork has no "
        "boot; enqueue a run when your service starts, or use runAt"
    ) in str(raised.value)
    assert cluster_kube.get("sj", "on-boot", "default") is None
