"""The tokens file: the contract's ``{token, tenant, role, queues}`` entries, checked
when the server starts so that no entry works otherwise than it reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tickwork.api.auth import Role, StaticTokens

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
    ],
)
def test_entries_that_would_not_work_as_written_stop_the_start(
    tmp_path: Path, entry: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ValueError, match=r"entry #1|token #1") as caught:
        load(tmp_path, [entry])
    assert fragment in str(caught.value)
