"""Every role started at the same moment, as real processes, on a freshly migrated
database: two schedulers, a dispatcher, ``tickwork dev`` and a worker. None exits, the
partitions each day needs exist once, and a run enqueued then is worked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import asyncpg
import httpx
from polling import eventually

from faults.conftest import SHARDS
from faults.postgres import free_port

TEAM = "team-token-for-the-start-test"
WORKER = "worker-token-for-the-start-test"
TOKENS = f"""\
- {{token: {TEAM}, tenant: acme, role: team}}
- {{token: {WORKER}, tenant: acme, role: worker, queues: [default]}}
"""
WORKER_SCRIPT = textwrap.dedent(
    """
    from tickwork.worker import run
    run(lambda context: None, wait_seconds=1, retry_base_seconds=0.05, retry_max_seconds=0.5)
    """
)
TICKWORK = str(Path(sys.executable).with_name("tickwork"))


def spawn(arguments: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        arguments,
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "TICKWORK_LOG_LEVEL": "INFO", **env},
    )


async def partitions_ready(url: str) -> bool:
    conn = await asyncpg.connect(url)
    try:
        counts = [
            await conn.fetchval(
                "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = $1 AND c.relname LIKE 'attempts\\_2%'",
                f"tickwork_shard_{shard}",
            )
            for shard in range(SHARDS)
        ]
    finally:
        await conn.close()
    return all(count >= 4 for count in counts)


async def answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=1) as http:
            return (await http.get(url + "/readyz")).status_code == 200
    except httpx.HTTPError:
        return False


async def test_every_role_starting_at_once(fault_url: str, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS)
    api, dev = free_port(), free_port()
    api_url, dev_url = f"http://127.0.0.1:{api}", f"http://127.0.0.1:{dev}"
    database = ["--database-url", fault_url, "--shards", str(SHARDS)]
    # Two schedulers on one host: each its own health port (in a pod, 8081 for each).
    health = ["--health-host", "127.0.0.1", "--health-port", "0"]
    roles = {
        "scheduler-a": [TICKWORK, "scheduler", *database, "--interval", "0.2", *health],
        "scheduler-b": [TICKWORK, "scheduler", *database, "--interval", "0.2", *health],
        "dispatcher": [
            TICKWORK,
            "dispatcher",
            *database,
            "--port",
            str(api),
            "--tokens",
            str(tokens),
        ],
        # Its own data dir: the default is the working directory's .tickwork/dev.
        "dev": [TICKWORK, "dev", *database, "--port", str(dev), "--data-dir", str(tmp_path)],
        "worker": [sys.executable, "-c", WORKER_SCRIPT],
    }
    worker_env = {"TICKWORK_URL": api_url, "TICKWORK_TOKEN": WORKER, "TICKWORK_QUEUES": "default"}
    logs = {name: tmp_path / f"{name}.log" for name in roles}
    processes = {
        name: spawn(arguments, logs[name], worker_env if name == "worker" else {})
        for name, arguments in roles.items()
    }
    try:
        await eventually(
            lambda: partitions_ready(fault_url), within=60, every=0.1, what="partitions"
        )
        # Five processes migrating and starting at once on two loaded cores: a minute.
        await eventually(lambda: answers(api_url), within=60, every=0.1, what="the dispatcher")
        await eventually(lambda: answers(dev_url), within=60, every=0.1, what="tickwork dev")
        async with httpx.AsyncClient(
            base_url=api_url, headers={"Authorization": f"Bearer {TEAM}"}
        ) as http:
            assert (await http.put("/v1/jobs/hello", json={})).status_code == 201
            run = (await http.post("/v1/jobs/hello/runs", json={})).json()

            async def succeeded() -> bool:
                answer = await http.get(f"/v1/runs/{run['runId']}")
                return bool(answer.json()["state"] == "succeeded")

            await eventually(succeeded, within=20, every=0.1, what="the run worked")
        exited = {name: p.returncode for name, p in processes.items() if p.poll() is not None}
        assert not exited, (exited, {name: logs[name].read_text() for name in exited})
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for name, process in processes.items():
        text = logs[name].read_text()
        assert process.returncode == 0, (name, process.returncode, text)
        assert "Traceback" not in text and "DuplicateTableError" not in text, (name, text)
