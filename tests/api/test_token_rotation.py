"""Rotating a token without a restart: the dispatcher reads its tokens file again when
it changes. A removed token is refused from the next call on and the long-polls it
holds end with 401; a file that no longer loads changes nothing; the CLI reads its
token from a file too."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from conftest import served
from polling import eventually

from api.clients import Waiting, long_poll, spy_on_waiters
from tickwork.api.services import Services
from tickwork.api.tokens_file import TokensFile
from tickwork.cli import cli, runtime
from tickwork.core.settings import ApiSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

OLD = "old-team-token-0123456789"
NEW = "new-team-token-0123456789"
WORKER = "the-worker-token-0123456789"


def entries(*tokens: str) -> str:
    lines = []
    for token in tokens:
        role = "worker" if token == WORKER else "team"
        lines.append(f"- {{token: {token}, tenant: acme, role: {role}, queues: [default]}}")
    return "\n".join(lines) + "\n"


def rewrite(path: Path, text: str) -> None:
    """Replace the file as editors and kubectl do (a new file renamed over the old):
    the change is seen even within the file system's timestamp granularity."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)


class Dispatcher:
    def __init__(self, url: str, tokens: TokensFile, services: Services) -> None:
        self.url = url
        self.tokens = tokens
        self.services = services

    async def status(self, token: str, path: str = "/v1/jobs") -> int:
        async with httpx.AsyncClient(base_url=self.url) as client:
            answer = await client.get(path, headers={"Authorization": f"Bearer {token}"})
            return answer.status_code

    def reloads(self, result: str) -> float:
        found = self.services.metrics.registry.get_sample_value(
            "tickwork_tokens_file_reloads_total", {"result": result}
        )
        return found or 0.0


def worker_of(api: Dispatcher) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {WORKER}"}
    return httpx.AsyncClient(base_url=api.url, headers=headers, timeout=30)


@contextlib.asynccontextmanager
async def dispatcher_over(
    database: Database, path: Path, check_seconds: float = 3600.0
) -> AsyncIterator[Dispatcher]:
    """The API with a reloading tokens file, as ``tickwork dispatcher --tokens`` runs
    it (a long check interval: the tests reload when they choose, unless they say)."""
    tokens = TokensFile(path, check_seconds=check_seconds)
    engine = Installation.over(database)
    metrics = Metrics()
    services = Services(
        engine=engine,
        authenticator=tokens,
        metrics=metrics,
        settings=ApiSettings(auth_failure_rate=0),
    )
    async with runtime.reloading(tokens, engine, metrics), served(services) as url:
        yield Dispatcher(url, tokens, services)


async def test_a_rotated_token_serves_and_the_removed_one_is_refused_at_once(
    database: Database, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(entries(OLD))
    async with dispatcher_over(database, path) as api:
        assert (await api.status(OLD), await api.status(NEW)) == (200, 401)
        # Both, while the clients move over; then the old one goes.
        rewrite(path, entries(OLD, NEW))
        assert api.tokens.reload()
        assert (await api.status(OLD), await api.status(NEW)) == (200, 200)
        rewrite(path, entries(NEW))
        assert api.tokens.reload()
        assert (await api.status(OLD), await api.status(NEW)) == (401, 200)
        assert not api.tokens.reload()  # unchanged: not read again
        assert api.reloads("loaded") == 2


async def test_a_file_that_no_longer_loads_keeps_the_tokens_that_serve(
    database: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(entries(OLD))
    async with dispatcher_over(database, path) as api:
        rewrite(path, entries(NEW) + "- {token: short, tenant: acme, role: team}\n")
        assert not api.tokens.reload()
        assert (await api.status(OLD), await api.status(NEW)) == (200, 401)
        [failed] = [r for r in caplog.records if getattr(r, "action", "") == "tokens-reload-failed"]
        assert failed.levelno == logging.ERROR
        assert "entry #2: token" in failed.getMessage()
        assert api.reloads("failed") == 1
        path.unlink()  # gone altogether (a Secret being replaced): the same
        assert not api.tokens.reload()
        assert await api.status(OLD) == 200
        # Fixed: it serves at once.
        path.write_text(entries(NEW))
        assert api.tokens.reload()
        assert (await api.status(OLD), await api.status(NEW)) == (401, 200)


async def test_a_secret_volumes_symlink_swap_is_seen_by_the_watch(
    database: Database, tmp_path: Path
) -> None:
    """A mounted Secret is ``tokens.yaml -> ..data/tokens.yaml`` with ``..data`` a
    symlink the kubelet swaps to a new timestamped folder on each update."""
    volume = tmp_path / "volume"
    first, second = volume / "..2026_12_01", volume / "..2026_12_02"
    for folder, token in ((first, OLD), (second, NEW)):
        folder.mkdir(parents=True)
        (folder / "tokens.yaml").write_text(entries(token))
    (volume / "..data").symlink_to(first.name)
    (volume / "tokens.yaml").symlink_to("..data/tokens.yaml")
    async with dispatcher_over(database, volume / "tokens.yaml", check_seconds=0.01) as api:
        assert await api.status(OLD) == 200
        swap = volume / "..data_tmp"
        swap.symlink_to(second.name)
        os.replace(swap, volume / "..data")

        async def new_serves() -> bool:
            return await api.status(NEW) == 200

        await eventually(new_serves, every=0.01, what="the watch reading the swapped file")
        assert await api.status(OLD) == 401


async def poll_across_a_reload(
    database: Database,
    path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wait_seconds: int,
    reloaded: str,
) -> tuple[httpx.Response, Waiting]:
    """The worker's long poll, asleep while the tokens file at ``path`` becomes
    ``reloaded`` and is read again: its answer, and how its wait was watched."""
    async with dispatcher_over(database, path) as api:
        waiting = spy_on_waiters(api.services.dispatcher.wakeups, monkeypatch)
        async with worker_of(api) as worker:
            body = {"queues": ["default"], "waitSeconds": wait_seconds}
            poll, watched = await long_poll(worker, waiting, **body)
            rewrite(path, reloaded)
            assert api.tokens.reload()
            return await asyncio.wait_for(poll, 10), watched


async def test_a_long_poll_of_a_removed_token_ends_with_401(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(entries(OLD, WORKER))
    answer, watched = await poll_across_a_reload(database, path, monkeypatch, 20, entries(OLD))
    assert answer.status_code == 401, answer.text
    assert answer.json()["detail"] == "the token was removed from the tokens file while it waited"
    # Woken by the reload, not ended at the next recheck of the wait (five seconds).
    assert watched.wakes == [True], watched.waits


async def test_a_long_poll_of_a_token_that_stays_goes_on_waiting(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(entries(OLD, WORKER))
    answer, _ = await poll_across_a_reload(database, path, monkeypatch, 1, entries(NEW, WORKER))
    assert answer.status_code == 200
    assert answer.json() == {"leases": []}


async def test_the_cli_reads_its_token_from_a_file(database: Database, tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(entries(OLD))
    token_file = tmp_path / "token"
    token_file.write_text(OLD + "\n")
    async with dispatcher_over(database, path) as api:

        def jobs_list(*args: str, **env: Any) -> Any:
            return CliRunner().invoke(
                cli, ["jobs", "list", "--url", api.url, *args], env={"TICKWORK_TOKEN": None, **env}
            )

        listed = await asyncio.to_thread(jobs_list, "--token-file", str(token_file))
        assert listed.exit_code == 0, listed.output
        assert listed.output.startswith("NAME")
        from_env = await asyncio.to_thread(jobs_list, TICKWORK_TOKEN_FILE=str(token_file))
        assert from_env.exit_code == 0, from_env.output
        both = await asyncio.to_thread(jobs_list, "--token", OLD, "--token-file", str(token_file))
        assert both.exit_code == 2
        assert "one of --token (TICKWORK_TOKEN) and --token-file" in both.output
        neither = await asyncio.to_thread(jobs_list)
        assert neither.exit_code == 2
        assert "give --token (or set TICKWORK_TOKEN), or --token-file" in neither.output
        token_file.write_text("")
        empty = await asyncio.to_thread(jobs_list, "--token-file", str(token_file))
        assert empty.exit_code == 2
        assert "is empty" in empty.output
