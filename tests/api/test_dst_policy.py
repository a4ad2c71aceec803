"""``schedule.dst`` through the HTTP API: kept as written, absent when it chooses
nothing, any other value refused with a problem naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ApiServer

from api.clients import PROBLEMS, client

NIGHTLY = {"cron": "30 2 * * *", "timeZone": "Europe/Berlin"}


async def test_a_policy_is_kept_as_written_and_an_empty_one_is_none(
    api_server: ApiServer,
) -> None:
    async with client(api_server, api_server.team_token) as team:
        dst = {"repeated": "last", "skipped": "skip"}
        created = await team.put("/v1/jobs/nightly", json={"schedule": {**NIGHTLY, "dst": dst}})
        assert created.status_code == 201, created.text
        assert created.json()["spec"]["schedule"]["dst"] == dst
        assert (await team.get("/v1/jobs/nightly")).json()["spec"]["schedule"]["dst"] == dst
        half = await team.put(
            "/v1/jobs/nightly", json={"schedule": {**NIGHTLY, "dst": {"repeated": "both"}}}
        )
        assert half.json()["spec"]["schedule"]["dst"] == {"repeated": "both"}
        empty = await team.put("/v1/jobs/nightly", json={"schedule": {**NIGHTLY, "dst": {}}})
        assert empty.status_code == 200, empty.text
        assert "dst" not in empty.json()["spec"]["schedule"]


@pytest.mark.parametrize(
    ("dst", "field"),
    [
        ({"repeated": "second"}, "schedule.dst.repeated"),
        ({"repeated": "FIRST"}, "schedule.dst.repeated"),
        ({"repeated": True}, "schedule.dst.repeated"),
        ({"skipped": "later"}, "schedule.dst.skipped"),
        ({"skip": "skip"}, "schedule.dst.skip"),
        ("first", "schedule.dst"),
    ],
)
async def test_other_values_are_refused_naming_the_field(
    api_server: ApiServer, dst: Any, field: str
) -> None:
    async with client(api_server, api_server.team_token) as team:
        response = await team.put("/v1/jobs/nightly", json={"schedule": {**NIGHTLY, "dst": dst}})
        assert response.status_code == 400, response.text
        problem = response.json()
        assert problem["type"] == PROBLEMS + "invalid-request"
        assert problem["field"] == field
        assert (await team.get("/v1/jobs/nightly")).status_code == 404
