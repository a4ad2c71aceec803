"""``tickwork notification-targets`` against the real API: a target put, listed, read
and deleted as a table, and the API's refusals one line naming the field."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner, Result
from conftest import ApiServer

from tickwork.cli import cli


async def tickwork(api_server: ApiServer, *args: str, token: str | None = None) -> Result:
    """Run the CLI in a thread: the server answers on this test's event loop."""
    environment = {
        "TICKWORK_URL": api_server.url,
        "TICKWORK_TOKEN": token or api_server.team_token,
    }
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=environment)


HOOK = "https://hooks.example.com/tickwork"


async def test_put_list_get_and_delete(api_server: ApiServer) -> None:
    put = await tickwork(
        api_server,
        *("notification-targets", "put", "ops", "--webhook", HOOK),
        *("--secret-env", "TICKWORK_HOOK_KEY_OPS", "--default"),
    )
    assert put.exit_code == 0, put.output
    header, row = put.output.splitlines()
    assert header.split() == ["NAME", "URL", "FORMAT", "SECRET", "DEFAULT", "UPDATED", "BY"]
    assert row.split()[:5] == ["ops", HOOK, "json", '{"env":"TICKWORK_HOOK_KEY_OPS"}', "true"]
    assert row.split()[6] == "acme-team"

    chat = await tickwork(
        api_server,
        *("notification-targets", "put", "chat", "--webhook", "https://chat.example.com/hook"),
        *("--format", "slack", "--secret-file", "/var/run/secrets/hook/key", "--default"),
    )
    assert chat.exit_code == 0, chat.output
    listed = await tickwork(api_server, "notification-targets", "list")
    assert listed.exit_code == 0, listed.output
    rows = [line.split() for line in listed.output.splitlines()[1:]]
    # One default per tenant: making chat the default unmade ops.
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("chat", "slack", '{"file":"/var/run/secrets/hook/key"}', "true"),
        ("ops", "json", '{"env":"TICKWORK_HOOK_KEY_OPS"}', "false"),
    ]

    got = await tickwork(api_server, "notification-targets", "get", "ops")
    assert got.exit_code == 0, got.output
    fields = dict(line.split(None, 1) for line in got.output.splitlines())
    assert fields["url"] == HOOK and fields["default"] == "false"
    assert fields["secretRef"] == '{"env":"TICKWORK_HOOK_KEY_OPS"}'
    as_json = await tickwork(api_server, "notification-targets", "get", "ops", "--json")
    assert json.loads(as_json.output)["format"] == "json"

    # Another tenant's team sees none of acme's targets.
    other = await tickwork(
        api_server, "notification-targets", "list", token=api_server.other_team_token
    )
    assert other.exit_code == 0 and other.output.split() == [
        *("NAME", "URL", "FORMAT", "SECRET", "DEFAULT", "UPDATED", "BY")
    ]

    deleted = await tickwork(api_server, "notification-targets", "delete", "ops")
    assert deleted.exit_code == 0, deleted.output
    assert deleted.output == "ops: deleted\n"
    gone = await tickwork(api_server, "notification-targets", "get", "ops")
    assert gone.exit_code == 1
    assert "404 Not found: no notification target 'ops'" in gone.output
    again = await tickwork(api_server, "notification-targets", "delete", "ops")
    assert again.exit_code == 1 and "404 Not found" in again.output


async def test_refusals_name_the_field(api_server: ApiServer) -> None:
    put = ("notification-targets", "put", "ops")
    bad_url = await tickwork(api_server, *put, "--webhook", "ftp://hooks.example.com/x")
    assert bad_url.exit_code == 1
    [line] = bad_url.output.splitlines()
    assert line.startswith("Error: 400 Invalid request: ") and "url" in line
    assert "http or https URL" in line
    bad_env = await tickwork(api_server, *put, "--webhook", HOOK, "--secret-env", "1-KEY")
    assert bad_env.exit_code == 1 and "secretRef.env" in bad_env.output
    relative = await tickwork(api_server, *put, "--webhook", HOOK, "--secret-file", "keys/hook")
    assert relative.exit_code == 1 and "secretRef.file" in relative.output
    assert "an absolute path" in relative.output
    bad_name = await tickwork(api_server, "notification-targets", "put", "Ops_1", "--webhook", HOOK)
    assert bad_name.exit_code == 1 and "400 Invalid request: name" in bad_name.output

    both = await tickwork(
        api_server, *put, "--webhook", HOOK, "--secret-env", "K", "--secret-file", "/k"
    )
    assert both.exit_code == 2
    assert "give one of --secret-env and --secret-file, not both" in both.output
    xml = await tickwork(api_server, *put, "--webhook", HOOK, "--format", "xml")
    assert xml.exit_code == 2 and "'xml' is not one of 'json', 'slack'" in xml.output
    no_url = await tickwork(api_server, *put)
    assert no_url.exit_code == 2 and "Missing option '--webhook'" in no_url.output
    # Nothing refused was written.
    listed = await tickwork(api_server, "notification-targets", "list", "--json")
    assert json.loads(listed.output)["items"] == []


async def test_an_admin_acts_for_a_tenant(api_server: ApiServer) -> None:
    made = await tickwork(
        api_server,
        *("notification-targets", "put", "ops", "--webhook", HOOK, "--tenant", "acme"),
        token=api_server.admin_token,
    )
    assert made.exit_code == 0, made.output
    assert made.output.splitlines()[1].split()[-1] == "ops-admin"
    mine = await tickwork(api_server, "notification-targets", "list")
    assert [line.split()[0] for line in mine.output.splitlines()[1:]] == ["ops"]
    refused = await tickwork(api_server, "notification-targets", "list", "--tenant", "globex")
    assert refused.exit_code == 1
    assert "403 Forbidden: this token acts for tenant 'acme', not 'globex'" in refused.output
