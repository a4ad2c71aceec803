"""Safe concurrent edits: a job's ETag, and PUT/DELETE with If-Match (or PUT with
If-None-Match: *) answering 412 when the job changed since it was read; the CLI's
``jobs get --yaml``, ``jobs apply`` and ``jobs edit`` carry it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result
from conftest import ApiServer

from api.clients import assert_problem, client
from tickwork.cli import cli

SPEC: dict[str, Any] = {"schedule": {"cron": "0 2 * * *"}, "queue": "billing"}


async def test_an_edit_of_what_was_read_is_refused_once_someone_changed_it(
    api_server: ApiServer,
) -> None:
    async with client(api_server, api_server.team_token) as team:
        created = await team.put("/v1/jobs/export", json=SPEC)
        assert created.headers["ETag"] == '"g1"'
        read = await team.get("/v1/jobs/export")
        assert read.headers["ETag"] == '"g1"'

        # Alice edits what she read; Bob, who read the same, is refused.
        alice = await team.put(
            "/v1/jobs/export", json=SPEC | {"priority": "critical"}, headers={"If-Match": '"g1"'}
        )
        assert alice.status_code == 200 and alice.headers["ETag"] == '"g2"'
        bob = await team.put(
            "/v1/jobs/export", json=SPEC | {"priority": "bulk"}, headers={"If-Match": '"g1"'}
        )
        problem = assert_problem(bob, 412, "precondition-failed")
        assert 'it is at ETag "g2", not "g1"' in problem["detail"]
        assert (await team.get("/v1/jobs/export")).json()["spec"]["priority"] == "critical"
        # A pause is a change too: the tag moves.
        paused = await team.post("/v1/jobs/export:pause")
        assert paused.headers["ETag"] == '"g3"'
        assert_problem(
            await team.delete("/v1/jobs/export", headers={"If-Match": '"g2"'}),
            412,
            "precondition-failed",
        )
        # Any of several tags, or "*" (it exists), matches; a weak tag never does.
        assert (
            await team.put("/v1/jobs/export", json=SPEC, headers={"If-Match": '"g1", "g3"'})
        ).status_code == 200
        assert_problem(
            await team.put("/v1/jobs/export", json=SPEC, headers={"If-Match": 'W/"g4"'}),
            412,
            "precondition-failed",
        )
        assert (await team.delete("/v1/jobs/export", headers={"If-Match": "*"})).status_code == 200
        assert_problem(
            await team.put("/v1/jobs/export", json=SPEC, headers={"If-Match": "*"}),
            412,
            "precondition-failed",
        )


async def test_if_none_match_creates_only(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        headers = {"If-None-Match": "*"}
        assert (await team.put("/v1/jobs/once", json=SPEC, headers=headers)).status_code == 201
        problem = assert_problem(
            await team.put("/v1/jobs/once", json=SPEC | {"priority": "bulk"}, headers=headers),
            412,
            "precondition-failed",
        )
        assert "exists already" in problem["detail"]
        assert (await team.get("/v1/jobs/once")).json()["spec"]["priority"] == "default"


async def test_a_malformed_precondition_names_the_header(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        await team.put("/v1/jobs/export", json=SPEC)
        for header, value in (
            ("If-Match", "g1"),  # unquoted
            ("If-Match", '"g1" junk'),
            ("If-Match", '"' + "x" * 2000 + '"'),
            ("If-None-Match", '"g1"'),
        ):
            problem = assert_problem(
                await team.put("/v1/jobs/export", json=SPEC, headers={header: value}),
                400,
                "invalid-request",
            )
            assert problem["field"] == header
        problem = assert_problem(
            await team.delete("/v1/jobs/export", headers={"If-None-Match": "*"}),
            400,
            "invalid-request",
        )
        assert problem["field"] == "If-None-Match"


async def test_two_edits_racing_from_the_same_read_one_wins(api_server: ApiServer) -> None:
    async with client(api_server, api_server.team_token) as team:
        await team.put("/v1/jobs/export", json=SPEC)
        for round_ in range(10):
            tag = (await team.get("/v1/jobs/export")).headers["ETag"]
            answers = await asyncio.gather(
                *(
                    team.put(
                        "/v1/jobs/export",
                        json=SPEC | {"payload": {"writer": writer, "round": round_}},
                        headers={"If-Match": tag},
                    )
                    for writer in range(4)
                )
            )
            assert sorted(a.status_code for a in answers) == [200, 412, 412, 412]
            [winner] = [a for a in answers if a.status_code == 200]
            stored = (await team.get("/v1/jobs/export")).json()["spec"]["payload"]
            assert stored == winner.json()["spec"]["payload"]


async def tickwork(api_server: ApiServer, *args: str, env: dict[str, str] | None = None) -> Result:
    environment = {"TICKWORK_URL": api_server.url, "TICKWORK_TOKEN": api_server.team_token}
    return await asyncio.to_thread(
        CliRunner().invoke, cli, list(args), env=environment | (env or {})
    )


async def test_the_cli_applies_what_it_read_unless_it_changed(
    api_server: ApiServer, tmp_path: Path
) -> None:
    async with client(api_server, api_server.team_token) as team:
        await team.put("/v1/jobs/export", json=SPEC)
    got = await tickwork(api_server, "jobs", "get", "export", "--yaml")
    assert got.exit_code == 0, got.output
    manifest = yaml.safe_load(got.output)
    assert manifest["kind"] == "ScheduledJob"
    assert manifest["metadata"] == {"name": "export", "namespace": "acme", "resourceVersion": "g1"}
    manifest["spec"]["priority"] = "critical"
    edited = tmp_path / "export.yaml"
    edited.write_text(yaml.safe_dump(manifest))
    applied = await tickwork(api_server, "jobs", "apply", "-f", str(edited))
    assert applied.exit_code == 0, applied.output
    # The same file again: it was read at g1, the job is at g2 now.
    stale = await tickwork(api_server, "jobs", "apply", "-f", str(edited))
    assert stale.exit_code == 1
    assert "export changed since this file was read" in stale.output
    assert "tickwork jobs get export --yaml" in stale.output
    # A manifest kubectl exported (the API server's resourceVersion) is not ours to send.
    manifest["metadata"]["resourceVersion"] = "8412"
    edited.write_text(yaml.safe_dump(manifest))
    assert (await tickwork(api_server, "jobs", "apply", "-f", str(edited))).exit_code == 0


EDITOR = """\
import pathlib, sys, httpx
path = pathlib.Path(sys.argv[-1])
path.write_text(path.read_text().replace("queue: billing", "queue: reports"))
if "{race}" == "yes":  # someone pauses the job while the editor is open
    httpx.post("{url}/v1/jobs/export:pause", headers={{"Authorization": "Bearer {token}"}})
"""


async def test_jobs_edit_writes_the_edit_unless_someone_changed_the_job_meanwhile(
    api_server: ApiServer, tmp_path: Path
) -> None:
    async with client(api_server, api_server.team_token) as team:
        await team.put("/v1/jobs/export", json=SPEC)
        for race in ("yes", "no"):
            script = tmp_path / f"editor-{race}.py"
            script.write_text(
                EDITOR.format(race=race, url=api_server.url, token=api_server.team_token)
            )
            result = await tickwork(
                api_server, "jobs", "edit", "export", env={"EDITOR": f"{sys.executable} {script}"}
            )
            spec = (await team.get("/v1/jobs/export")).json()["spec"]
            if race == "yes":
                assert result.exit_code == 1
                assert "export changed while you edited it: nothing applied" in result.output
                assert spec["queue"] == "billing"
            else:
                assert result.exit_code == 0, result.output
                assert spec["queue"] == "reports"
