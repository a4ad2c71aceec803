"""``tickwork dev`` and ``tickwork dispatcher`` as a newcomer runs them: real processes,
read line by line, stopped with SIGINT like Ctrl-C.

The tests wait for the lines they expect (with a timeout), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import stat
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from conftest import TEST_SHARDS, scratch_database
from polling import eventually

from tickwork.core.shards import ShardMap
from tickwork.store import shard_leases
from tickwork.store.database import Database

pytestmark = pytest.mark.timeout(90)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "jobs"
WAIT = 30.0
TEAM_TOKEN = "team-default-token-0123456789"


@dataclass
class Process:
    """A running ``tickwork`` command whose output (stdout and stderr) is read as lines."""

    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    _seen: int = 0

    async def expect(self, pattern: str) -> re.Match[str]:
        """The first line from here on matching ``pattern``."""
        compiled = re.compile(pattern)
        assert self.process.stdout is not None
        async with asyncio.timeout(WAIT):
            while True:
                while self._seen < len(self.lines):
                    line = self.lines[self._seen]
                    self._seen += 1
                    found = compiled.search(line)
                    if found:
                        return found
                raw = await self.process.stdout.readline()
                if not raw:
                    raise AssertionError(f"exited before {pattern!r}:\n" + self.output)
                self.lines.append(raw.decode().rstrip("\n"))

    async def interrupt(self) -> int:
        """Ctrl-C; the rest of the output; the exit status."""
        assert self.process.stdout is not None
        self.process.send_signal(signal.SIGINT)
        async with asyncio.timeout(WAIT):
            rest = await self.process.stdout.read()
            self.lines += rest.decode().splitlines()
            return await self.process.wait()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


@contextlib.asynccontextmanager
async def tickwork(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Process]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tickwork",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=environment | (env or {}),
    )
    try:
        yield Process(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def unexpected(lines: list[str]) -> list[str]:
    """Lines a newcomer should not see: tracebacks, and warnings other than the demo
    handlers' expected failures."""
    return [
        line
        for line in lines
        if "Traceback" in line
        or line.startswith("  File ")
        or (" WARNING " in line and "[failed]" not in line)
        or " ERROR " in line
    ]


async def test_dev_is_quiet_and_keeps_its_admin_token(database_url: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    command = (
        *("dev", "--port", "0", "--data-dir", str(data_dir), "--database-url", database_url),
        *("--manifests", str(EXAMPLES), "--demo-worker"),
    )
    async with tickwork(*command) as first:
        token = (await first.expect(r"^  token +(\S+)$")).group(1)
        # The expected failure of the demo's flaky job: one line, no traceback.
        failed = await first.expect(r"\[failed\] run \S+ \(flaky-export, attempt 1\) failed: ")
        assert failed.string.endswith(
            "ConnectionError: the export target did not answer (first attempts always fail)"
        )
        assert await first.interrupt() == 0
    assert not unexpected(first.lines), first.output
    token_file = data_dir / "admin-token"
    assert token_file.read_text().strip() == token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

    async with tickwork(*command) as second:
        assert (await second.expect(r"^  token +(\S+)$")).group(1) == token
        await second.expect(r"\[failed\] run \S+ \(flaky-export, attempt 1\)")
        assert await second.interrupt() == 0
    assert not unexpected(second.lines), second.output
    # The jobs did not change on disk: the restart neither rewrites nor reports them.
    assert not [line for line in second.lines if "[manifest-apply]" in line], second.output


async def test_dev_reads_tokens_and_shards_from_the_environment_next_to_the_demo_worker(
    server_url: str, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"- {{token: {TEAM_TOKEN}, tenant: default, role: team}}\n")
    env = {"TICKWORK_TOKENS_FILE": str(tokens), "TICKWORK_SHARDS": "2"}
    async with scratch_database(server_url, "tickwork_dev") as url:
        command = ("dev", "--port", "0", "--data-dir", str(tmp_path / "dev"))
        command += ("--manifests", str(EXAMPLES), "--demo-worker")
        async with tickwork(*command, env=env | {"TICKWORK_DATABASE_URL": url}) as dev:
            api = (await dev.expect(r"^  API +(\S+)$")).group(1)
            dashboard = await dev.expect(r"^  dashboard +(\S+)  \(sign in with a token\)$")
            assert dashboard.group(1) == api + "/ui/"
            await dev.expect(rf"^  tokens +{re.escape(str(tokens))}$")
            # The demo worker leases with its own token, next to the file's.
            await dev.expect(r"hello from run \S+ \(attempt 1\)")
            headers = {"Authorization": f"Bearer {TEAM_TOKEN}"}
            async with httpx.AsyncClient(base_url=api, headers=headers) as client:
                assert (await client.get("/readyz")).json()["shards"] == 2
                sign_in = await client.get("/ui/")
                assert sign_in.status_code == 303 and sign_in.headers["location"].startswith(
                    "/ui/login"
                )
                listed = (await client.get("/v1/jobs")).json()
            assert sorted(job["name"] for job in listed["items"]) == [
                "flaky-export",
                "hello",
                "nightly-report",
                "poison-pill",
            ]
            assert await dev.interrupt() == 0
    assert "token " not in dev.output  # no admin token is made up next to a tokens file
    assert not (tmp_path / "dev" / "admin-token").exists()
    assert not unexpected(dev.lines), dev.output


@pytest.mark.parametrize("role", ["dev", "dispatcher"])
async def test_a_port_in_use_is_one_line_and_exit_status_1(
    role: str, taken_port: int, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"- {{token: {TEAM_TOKEN}, tenant: default, role: team}}\n")
    # Nothing listens on port 1: the database is never reached, the port is checked first.
    nowhere = "postgresql://127.0.0.1:1/nothing"
    extra = ("--host", "127.0.0.1", "--tokens", str(tokens)) if role == "dispatcher" else ()
    async with tickwork(role, "--port", str(taken_port), "--database-url", nowhere, *extra) as cmd:
        status = await cmd.process.wait()
        assert cmd.process.stdout is not None
        output = (await cmd.process.stdout.read()).decode()
    assert status == 1
    assert output == f"tickwork {role}: port {taken_port} is in use; pass --port\n"


async def lease_holders(database_url: str) -> Counter[str | None]:
    """How many shards each holder's lease has (the postgres coordination backend)."""
    async with Database(ShardMap.from_dsns([database_url], TEST_SHARDS)) as database:
        holders: Counter[str | None] = Counter()
        for shard in range(TEST_SHARDS):
            async with database.connection(shard) as conn:
                holders[(await shard_leases.read(conn)).holder] += 1
        return holders


async def test_two_dev_processes_on_one_database_share_the_shards(
    database_url: str, tmp_path: Path
) -> None:
    async def split(expected: list[int]) -> None:
        async def held() -> bool:
            holders = await lease_holders(database_url)
            return None not in holders and sorted(holders.values()) == expected

        await eventually(held, within=WAIT, every=0.05, what=f"the shards split {expected}")

    command = ("dev", "--port", "0", "--database-url", database_url)
    async with (
        tickwork(*command, "--data-dir", str(tmp_path / "one")) as one,
        tickwork(*command, "--data-dir", str(tmp_path / "two")) as two,
    ):
        await one.expect(r"^  API +(\S+)$")
        await two.expect(r"^  API +(\S+)$")
        await split([2, 2])  # ceil(4 shards / 2 processes) each
        assert await one.interrupt() == 0  # its leases released: the other takes them
        await split([4])
        assert await two.interrupt() == 0
    assert await lease_holders(database_url) == Counter({None: TEST_SHARDS})
    assert not unexpected(one.lines + two.lines), one.output + two.output
