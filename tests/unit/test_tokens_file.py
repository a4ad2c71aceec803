"""The tokens file: the contract's ``{token, tenant, role, queues}`` entries, checked
when the server starts so that no entry works otherwise than it reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tickwork.api.auth import Role, StaticTokens
from tickwork.cli import cli

WORKER = {"token": "worker-token-0123456789", "tenant": "acme", "role": "worker"}


def load(tmp_path: Path, entries: list[dict[str, object]]) -> StaticTokens:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(entries))
    return StaticTokens.from_file(path)


async def test_admin_and_team_entries_may_list_no_queues(tmp_path: Path) -> None:
    tokens = load(
        tmp_path,
        [
            {"token": "admin-token-0123456789", "tenant": "ops", "role": "admin", "queues": []},
            {"token": "team-token-0123456789", "tenant": "acme", "role": "team", "queues": []},
            {"token": "team-token-9876543210", "tenant": "acme", "role": "team"},
            WORKER | {"queues": ["default", "billing"]},
        ],
    )
    admin = await tokens.authenticate("admin-token-0123456789")
    team = await tokens.authenticate("team-token-0123456789")
    worker = await tokens.authenticate("worker-token-0123456789")
    assert admin is not None and admin.role is Role.admin and admin.queues is None
    assert team is not None and team.role is Role.team and team.queues is None
    assert worker is not None and worker.queues == frozenset({"default", "billing"})


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        (WORKER | {"queues": []}, "a worker token must list at least one queue"),
        (WORKER, "a worker token must list at least one queue"),
        (WORKER | {"tenant": "Acme Corp/../x", "queues": ["q"]}, "tenant"),
        (WORKER | {"tenant": "acme\n", "queues": ["q"]}, "tenant"),
        (WORKER | {"tenant": "", "queues": ["q"]}, "tenant"),
        (WORKER | {"token": " " * 20, "queues": ["q"]}, "whitespace"),
        (WORKER | {"token": "a long token with spaces", "queues": ["q"]}, "whitespace"),
        (WORKER | {"token": "tab\tseparated-token-0123", "queues": ["q"]}, "whitespace"),
        (WORKER | {"token": "trailing-newline-0123456\n", "queues": ["q"]}, "whitespace"),
        (WORKER | {"token": "short", "queues": ["q"]}, "token"),
        (WORKER | {"queues": ["Not A Queue"]}, "queue"),
        (WORKER | {"queues": ["q\n"]}, "queue"),
        # A Kubernetes principal's rights come from RBAC, which a tokens file has none of.
        (WORKER | {"role": "kubernetes"}, "role 'kubernetes' cannot be given in a tokens file"),
        (WORKER | {"role": "root"}, "role"),
    ],
)
def test_entries_that_would_not_work_as_written_stop_the_start(
    tmp_path: Path, entry: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ValueError, match=r"entry #1|token #1") as caught:
        load(tmp_path, [entry])
    assert fragment in str(caught.value)


async def test_a_metrics_entry_is_a_role_of_its_own(tmp_path: Path) -> None:
    tokens = load(
        tmp_path, [{"token": "scrape-token-0123456789", "tenant": "ops", "role": "metrics"}]
    )
    scraper = await tokens.authenticate("scrape-token-0123456789")
    assert scraper is not None and scraper.role is Role.metrics and scraper.queues is None


def test_a_kubernetes_role_in_the_tokens_file_stops_the_dispatcher(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text("- {token: k8s-like-token-0123456789, tenant: acme, role: kubernetes}\n")
    # Nothing listens there: the file is refused before any database is reached.
    nowhere = "postgresql://127.0.0.1:1/nothing"
    result = CliRunner().invoke(
        cli, ["dispatcher", "--tokens", str(path), "--database-url", nowhere, "--port", "0"]
    )
    assert result.exit_code == 1, result.output
    assert "entry #1: role: role 'kubernetes' cannot be given in a tokens file" in result.output
    assert "team, worker, admin, metrics" in result.output
