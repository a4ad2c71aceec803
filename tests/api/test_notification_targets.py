"""Notification targets through the API: a team declares its webhook by reference to
its key (never the key), bad input is refused naming the field, worker tokens are
refused, and another tenant's targets are invisible."""

from __future__ import annotations

import pytest
from conftest import ApiServer

from api.clients import client

TARGET = {
    "url": "https://hooks.example.com/tickwork",
    "format": "slack",
    "secretRef": {"file": "/etc/tickwork/hook-key"},
    "default": True,
}


async def test_a_team_declares_reads_lists_and_deletes_its_target(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        made = await team.put("/v1/notification-targets/ops", json=TARGET)
        assert made.status_code == 201, made.text
        body = made.json()
        assert {k: body[k] for k in TARGET} == TARGET
        assert body["name"] == "ops" and body["updatedBy"] == "acme-team"
        assert (await team.put("/v1/notification-targets/ops", json=TARGET)).status_code == 200
        got = await team.get("/v1/notification-targets/ops")
        assert got.status_code == 200 and got.json()["secretRef"] == TARGET["secretRef"]
        listed = (await team.get("/v1/notification-targets")).json()
        assert [t["name"] for t in listed["items"]] == ["ops"] and listed["nextCursor"] is None
        assert (await team.delete("/v1/notification-targets/ops")).status_code == 204
        gone = await team.get("/v1/notification-targets/ops")
        assert gone.status_code == 404 and gone.json()["field"] == "name"
        again = await team.delete("/v1/notification-targets/ops")
        assert again.status_code == 404


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"url": "ftp://hooks.example.com/x"}, "url"),
        ({"url": "https:///no-host"}, "url"),
        ({"url": 5}, "url"),
        ({"format": "xml"}, "format"),
        ({"secretRef": {"env": "KEY", "file": "/k"}}, "secretRef"),
        ({"secretRef": {}}, "secretRef"),
        ({"secretRef": {"env": "1BAD-NAME"}}, "secretRef.env"),
        ({"secretRef": {"file": "relative/key"}}, "secretRef.file"),
        ({"secretRef": {"value": "the-key-itself"}}, "secretRef.value"),
        ({"secret": "the-key-itself"}, "secret"),
        ({"default": "yes"}, "default"),
        ({"name": "other"}, "name"),
    ],
)
async def test_bad_targets_are_refused_naming_the_field(
    api_server: ApiServer, change: dict[str, object], field: str
) -> None:
    async with client(api_server, api_server.team_token) as team:
        answer = await team.put("/v1/notification-targets/ops", json=TARGET | change)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field, answer.text
    assert "the-key-itself" not in answer.text


async def test_a_bad_name_is_refused(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        answer = await team.put("/v1/notification-targets/Bad_Name", json=TARGET)
    assert answer.status_code == 400 and answer.json()["field"] == "name", answer.text


async def test_worker_tokens_are_refused(api_server: ApiServer) -> None:
    async with client(api_server, api_server.worker_token) as worker:
        for answer in (
            await worker.get("/v1/notification-targets"),
            await worker.put("/v1/notification-targets/ops", json=TARGET),
            await worker.get("/v1/notification-targets/ops"),
            await worker.delete("/v1/notification-targets/ops"),
        ):
            assert answer.status_code == 403, answer.text


async def test_another_tenants_targets_are_invisible(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        assert (await team.put("/v1/notification-targets/ops", json=TARGET)).status_code == 201
    async with client(api_server, api_server.other_team_token) as other:
        assert (await other.get("/v1/notification-targets")).json()["items"] == []
        assert (await other.get("/v1/notification-targets/ops")).status_code == 404
        assert (await other.delete("/v1/notification-targets/ops")).status_code == 404
        forbidden = await other.get("/v1/notification-targets", params={"tenant": "acme"})
        assert forbidden.status_code == 403
    async with client(api_server, api_server.team_token) as team:
        assert (await team.get("/v1/notification-targets/ops")).status_code == 200


async def test_the_notify_job_and_queue_are_reserved(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        job = await team.put("/v1/jobs/tickwork.notify", json={})
        assert job.status_code == 400 and job.json()["field"] == "name", job.text
        queue = await team.put("/v1/jobs/sneaky", json={"queue": "tickwork-notifications"})
        assert queue.status_code == 400 and queue.json()["field"] == "queue", queue.text


async def test_no_token_leases_the_notifications_queue(api_server: ApiServer) -> None:
    # Its runs are the deliveries: a worker that took one would swallow an alert.
    for token in (api_server.worker_token, api_server.admin_token):
        async with client(api_server, token) as caller:
            answer = await caller.post(
                "/v1/lease",
                json={"queues": ["default", "tickwork-notifications"], "workerId": "w"},
            )
        assert answer.status_code == 403 and answer.json()["field"] == "queues", answer.text


@pytest.mark.parametrize(
    ("notify", "field"),
    [
        ({"deadline": "6am"}, "notify.deadline"),
        ({"deadline": "06:00", "timeZone": "Mars/Olympus"}, "notify.timeZone"),
        ({"leasedLongerThanSeconds": 0}, "notify.leasedLongerThanSeconds"),
        ({"on": ["late"]}, "notify.on[0]"),
    ],
)
async def test_bad_watches_are_refused_naming_the_field(
    api_server: ApiServer, notify: dict[str, object], field: str
) -> None:
    async with client(api_server, api_server.team_token) as team:
        answer = await team.put("/v1/jobs/nightly", json={"notify": notify})
    assert answer.status_code == 400 and answer.json()["field"] == field, answer.text
