"""The coordination defaults of the contract, and how ``tickwork scheduler`` refuses a
backend it cannot reach: one line, exit status 1, before it schedules anything."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tickwork.cli import cli
from tickwork.coordination import choice, kubernetes
from tickwork.core import pod


def test_outside_a_pod_the_defaults_are_postgres_hostname_pid_and_tickwork(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(kubernetes, "SERVICE_ACCOUNT_TOKEN", tmp_path / "absent")
    for name in ("POD_NAME", "POD_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    assert choice.default_kind() == "postgres"
    assert choice.default_identity() == f"{socket.gethostname()}-{os.getpid()}"
    assert choice.default_namespace() == "tickwork"


def test_in_a_pod_the_defaults_are_kubernetes_and_the_pods_name_and_namespace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("a service-account token")
    monkeypatch.setattr(kubernetes, "SERVICE_ACCOUNT_TOKEN", token)
    monkeypatch.setenv("POD_NAME", "tickwork-scheduler-7d9f-x2")
    monkeypatch.setenv("POD_NAMESPACE", "jobs")
    assert choice.default_kind() == "kubernetes"
    assert choice.default_identity() == "tickwork-scheduler-7d9f-x2"
    assert choice.default_namespace() == "jobs"


@pytest.mark.parametrize("identity", ["", "   ", "a\nb", "x" * 201])
def test_an_identity_that_cannot_name_a_lease_is_refused(identity: str) -> None:
    result = CliRunner().invoke(
        cli,
        ["scheduler", "--database-url", "postgresql://127.0.0.1:1/x", "--identity", identity],
    )
    assert result.exit_code == 2
    assert "--identity" in result.output


def test_kubernetes_coordination_without_a_cluster_is_one_line_and_exit_status_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(kubernetes, "SERVICE_ACCOUNT_TOKEN", tmp_path / "absent")
    monkeypatch.setattr(pod, "DEFAULT_KUBECONFIG", tmp_path / "absent")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    result = CliRunner().invoke(
        cli,
        [
            *("scheduler", "--database-url", "postgresql://127.0.0.1:1/x"),
            *("--coordination", "kubernetes", "--health-port", "-1"),
        ],
    )
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"Error: cannot load the kubeconfig {tmp_path / 'no-such-kubeconfig'}: no such file\n"
    )


async def test_a_taken_health_port_is_one_line_and_exit_status_1(database_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "tickwork", "scheduler", "--database-url", database_url, "--shards", "4"),
            *("--coordination", "postgres", "--health-host", "127.0.0.1"),
            *("--health-port", str(port)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(30):
                output, _ = await process.communicate()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert process.returncode == 1, output
    assert output.decode().startswith(f"Error: cannot listen on 127.0.0.1:{port}: "), output
