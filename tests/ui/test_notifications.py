"""The dashboard's notifications page: the tenant's targets (where each one's key is
read, never a key), the deliveries still being made, and those made, newest first."""

from __future__ import annotations

import asyncio
import html as markup
import re
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from click.testing import CliRunner
from conftest import OTHER_TEAM_TOKEN, TEAM_TOKEN, served, services_over
from conftest import test_tokens as static_tokens

from tickwork.api.auth import Action, FirstMatch, Principal, Role
from tickwork.cli import cli
from tickwork.core.errors import Forbidden
from tickwork.engine.notifications import Deliveries, Request, Target, Targets
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

from .conftest import UiServer, dead_run, make_job, signed_in

KEY = "hook-key-never-shown-0123"
READER_TOKEN = "sa-acme-audit-reader-0123456789"


@dataclass
class Receiver:
    """What the delivery posts to: answers ``status``, keeps what it was sent."""

    status: int = 204
    received: list[Request] = field(default_factory=list)

    async def post(self, request: Request) -> int:
        self.received.append(request)
        return self.status


def target(name: str, url: str, fmt: str, ref: dict[str, str] | None, default: bool) -> Target:
    return Target(name, url, fmt, ref, default, datetime.now().astimezone(), "acme-team")


async def _seed(server: UiServer, receiver: Receiver) -> tuple[str, str, str]:
    """Two targets (and globex's), and three notifications: nightly's delivered,
    report's not signed (its target's key file is missing), nightly's second refused by
    its receiver. Answers the three dead runs they are about."""
    targets = Targets(server.database, server.services.engine.clock)
    await targets.put(
        "acme", target("ops", "https://acme.example.com/ops", "json", {"env": "HOOK_KEY"}, True)
    )
    await targets.put(
        "acme", target("chat", "https://chat.example.com/in", "slack", {"file": "/keys/c"}, False)
    )
    await targets.put("globex", target("theirs", "https://globex.example.com", "json", None, True))
    await make_job(server, "acme", "nightly")
    await make_job(server, "acme", "report", notify={"target": "chat"})
    deliveries = Deliveries(
        server.database, server.services.dispatcher, receiver.post, environ={"HOOK_KEY": KEY}
    )
    first = await dead_run(server, "acme", "nightly")
    assert await deliveries.deliver_ready() == 1
    second = await dead_run(server, "acme", "report")
    # The chat key's file does not exist here: the delivery fails, and is retried.
    assert await deliveries.deliver_ready() == 1
    receiver.status = 503
    third = await dead_run(server, "acme", "nightly", "disk full")
    assert await deliveries.deliver_ready() == 1
    return first.run_id, second.run_id, third.run_id


def _rows(html: str, table: str) -> list[str]:
    found = re.search(rf'<table class="{table} cards-on-phone">(.*?)</table>', html, re.S)
    assert found, f"no {table} table"
    return re.findall(r"<tr\b.*?</tr>", found.group(1).split("<tbody>")[1], re.S)


def _text(row: str) -> str:
    return " ".join(markup.unescape(re.sub(r"<[^>]+>", " ", row)).split())


async def test_targets_deliveries_and_those_being_retried(dashboard: UiServer) -> None:
    receiver = Receiver()
    nightly, report, refused = await _seed(dashboard, receiver)
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        page = await client.get("/ui/notifications")
    assert page.status_code == 200
    html = page.text
    assert '<a href="/ui/notifications" aria-current="page">Notifications</a>' in html

    chat, ops = (_text(row) for row in _rows(html, "targets"))
    assert chat.startswith("chat https://chat.example.com/in slack signed key from file /keys/c")
    assert ops.startswith(
        "ops https://acme.example.com/ops json signed key from environment variable HOOK_KEY "
        "default"
    )
    assert ops.endswith("by acme-team") and "theirs" not in html
    assert "not signed" not in html

    # report's notification could not be signed (no key file), nightly's second was
    # refused: both wait for their next attempt.
    pending = {_text(row).split()[0]: _text(row) for row in _rows(html, "pending")}
    assert len(pending) == 2
    retried = next(text for text in pending.values() if " nightly dead ops " in text)
    assert "retry wait 1 of 20" in retried and "POST 'ops': answered 503" in retried
    signing = next(text for text in pending.values() if " report dead chat " in text)
    assert "cannot read secret file /keys/c" in signing
    assert 'href="/ui/dlq?job=tickwork.notify"' in html

    # Delivered: one, nightly's first dead run, with the key a receiver deduplicates by.
    [delivered] = [_text(row) for row in _rows(html, "deliveries")]
    assert f"nightly dead ops notify/dead/{nightly} " in delivered
    assert delivered.endswith(" 1")
    assert len(receiver.received) == 2 and report not in delivered and refused not in delivered
    assert "Older deliveries may be missing" not in html

    # The live region alone, as the page refreshes it.
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        live = await client.get("/ui/notifications", headers={"X-Tickwork-Live": "1"})
    assert live.status_code == 200 and "<html" not in live.text
    assert f"notify/dead/{nightly}" in live.text


async def test_newest_first_and_another_tenant_sees_none(dashboard: UiServer) -> None:
    receiver = Receiver()
    targets = Targets(dashboard.database, dashboard.services.engine.clock)
    await targets.put("acme", target("ops", "https://acme.example.com/ops", "json", None, True))
    await make_job(dashboard, "acme", "nightly")
    await make_job(dashboard, "acme", "report")
    deliveries = Deliveries(dashboard.database, dashboard.services.dispatcher, receiver.post)
    first = await dead_run(dashboard, "acme", "nightly")
    await deliveries.deliver_ready()
    second = await dead_run(dashboard, "acme", "report")
    await deliveries.deliver_ready()
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        html = (await client.get("/ui/notifications")).text
    rows = _rows(html, "deliveries")
    assert [re.findall(r'href="/ui/jobs/([^"]+)"', row) for row in rows] == [
        ["report"],
        ["nightly"],
    ]
    assert f"notify/dead/{second.run_id}" in rows[0] and f"notify/dead/{first.run_id}" in rows[1]
    [ops] = _rows(html, "targets")
    assert "not signed" in _text(ops)
    assert "Nothing waiting" in html

    async with signed_in(dashboard, OTHER_TEAM_TOKEN) as client:
        theirs = (await client.get("/ui/notifications")).text
    assert "No notification target in tenant globex" in theirs
    assert "No notification delivered yet in tenant globex" in theirs
    assert "nightly" not in theirs and "acme.example.com" not in theirs

    # The command the empty page suggests is one the CLI takes.
    suggested = re.search(r"<code>tickwork (notification-targets put [^<]+)</code>", theirs)
    assert suggested is not None
    environment = {"TICKWORK_URL": dashboard.url, "TICKWORK_TOKEN": OTHER_TEAM_TOKEN}
    made = await asyncio.to_thread(
        CliRunner().invoke, cli, shlex.split(suggested.group(1)), env=environment
    )
    assert made.exit_code == 0, made.output
    async with signed_in(dashboard, OTHER_TEAM_TOKEN) as client:
        after = (await client.get("/ui/notifications")).text
    [made_row] = _rows(after, "targets")
    assert _text(made_row).startswith(
        "ops https://hooks.example.com/tickwork json not signed default"
    )


async def test_deliveries_are_found_behind_a_long_log_of_other_changes(
    dashboard: UiServer,
) -> None:
    targets = Targets(dashboard.database, dashboard.services.engine.clock)
    await targets.put("acme", target("ops", "https://acme.example.com/ops", "json", None, True))
    await make_job(dashboard, "acme", "nightly")
    deliveries = Deliveries(dashboard.database, dashboard.services.dispatcher, Receiver().post)
    await dead_run(dashboard, "acme", "nightly")
    await deliveries.deliver_ready()
    for paused in [True, False] * 30:  # newer entries of the log, of other actions
        await dashboard.jobs.set_paused("acme", "nightly", paused, "test")
    async with signed_in(dashboard, TEAM_TOKEN) as client:
        found = (await client.get("/ui/notifications")).text
    [row] = _rows(found, "deliveries")
    assert "notify/dead/" in _text(row)


class AuditOnly:
    """A ServiceAccount's RBAC that grants listing the audit log and nothing else."""

    async def check(self, actions: list[Action]) -> None:
        for action in actions:
            if action.resource != "audit":
                raise Forbidden(f"may not {action.describe()}")

    async def permitted(self, actions: list[Action]) -> list[bool]:
        return [action.resource == "audit" for action in actions]


class AuditReader:
    """Authenticates one ServiceAccount's token, as a TokenReview would."""

    async def authenticate(self, token: str) -> Principal | None:
        if token != READER_TOKEN:
            return None
        return Principal(
            "system:serviceaccount:acme:reader", "acme", Role.kubernetes, None, AuditOnly()
        )


@pytest.fixture
async def reader_dashboard(database: Database) -> AsyncIterator[UiServer]:
    reader = FirstMatch([static_tokens(), AuditReader()])
    services = services_over(database, reader, ui_secret="test-secret-" + "x" * 32)
    async with served(services) as url:
        yield UiServer(url=url, services=services, scheduler=Scheduler(database))


async def test_a_viewer_who_may_read_only_the_audit_log_sees_the_deliveries(
    reader_dashboard: UiServer,
) -> None:
    server = reader_dashboard
    targets = Targets(server.database, server.services.engine.clock)
    await targets.put("acme", target("ops", "https://acme.example.com/ops", "json", None, True))
    await make_job(server, "acme", "nightly")
    deliveries = Deliveries(server.database, server.services.dispatcher, Receiver().post)
    run = await dead_run(server, "acme", "nightly")
    await deliveries.deliver_ready()
    async with signed_in(server, READER_TOKEN) as client:
        page = await client.get("/ui/notifications")
        assert page.status_code == 200
        assert f"notify/dead/{run.run_id}" in page.text
        assert "acme.example.com" not in page.text and 'id="targets"' not in page.text
        assert 'id="pending"' not in page.text
        async with signed_in(server, TEAM_TOKEN) as team:
            full = await team.get("/ui/notifications")
        assert 'id="targets"' in full.text and 'id="pending"' in full.text
