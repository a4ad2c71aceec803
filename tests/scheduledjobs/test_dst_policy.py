"""``spec.schedule.dst`` of a ScheduledJob: the API server takes the six combinations
as written, adds nothing when it is left out, refuses any other value naming the field,
and the operator's webhook admits it and stores it with the job."""

from __future__ import annotations

from typing import Any

import pytest
from kube import emulator
from kube.status import ApiError

from tickwork.core.cron import DstPolicy, DstRepeated, DstSkipped
from tickwork.core.spec import JobSpec
from tickwork.engine.jobs import Jobs

from .conftest import OperatorFactory, observed, scheduled_job

NIGHTLY = {"cron": "30 2 * * *", "timeZone": "Europe/Berlin"}


async def test_the_api_server_takes_every_policy_as_written(
    cluster_kube: emulator.Emulator,
) -> None:
    plain = await cluster_kube.create(scheduled_job("plain", schedule=dict(NIGHTLY)))
    assert "dst" not in plain["spec"]["schedule"]  # no default is filled in
    assert JobSpec.model_validate(plain["spec"]).to_document() == plain["spec"]
    for repeated in ("first", "last", "both"):
        for skipped in ("shift", "skip"):
            dst = {"repeated": repeated, "skipped": skipped}
            name = f"nightly-{repeated}-{skipped}"
            created = await cluster_kube.create(
                scheduled_job(name, schedule={**NIGHTLY, "dst": dst})
            )
            assert created["spec"]["schedule"]["dst"] == dst
            assert JobSpec.model_validate(created["spec"]).to_document() == created["spec"]


@pytest.mark.parametrize(
    ("dst", "field"),
    [
        ({"repeated": "second"}, "spec.schedule.dst.repeated"),
        ({"repeated": "First"}, "spec.schedule.dst.repeated"),
        ({"skipped": "later"}, "spec.schedule.dst.skipped"),
        ({"skipped": 1}, "spec.schedule.dst.skipped"),
    ],
)
async def test_the_api_server_refuses_other_values_naming_the_field(
    cluster_kube: emulator.Emulator, dst: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiError) as raised:
        await cluster_kube.create(scheduled_job("refused", schedule={**NIGHTLY, "dst": dst}))
    assert raised.value.code == 422
    assert f"{field}: " in str(raised.value)
    assert cluster_kube.get("sj", "refused", "default") is None


async def test_the_operator_admits_and_stores_the_policy(
    cluster_kube: emulator.Emulator, operator_for: OperatorFactory, jobs: Jobs
) -> None:
    dst = {"repeated": "both", "skipped": "skip"}
    async with operator_for():
        await cluster_kube.create(
            scheduled_job("nightly", schedule={**NIGHTLY, "dst": dst}), admit=True
        )
        await cluster_kube.wait_for("sj", "nightly", observed(1), namespace="default")
    schedule = (await jobs.get("default", "nightly")).definition.spec.schedule
    assert schedule is not None
    assert schedule.compile().dst == DstPolicy(DstRepeated.both, DstSkipped.skip)
