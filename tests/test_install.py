"""The base install is what a team's worker image needs, and nothing more.

The wheel is built from this checkout and installed without extras into a fresh
virtualenv (its dependencies come from the package index, or pip's cache); a worker
then runs in that virtualenv against the real API served by this test process. The
server roles answer with the extras to install instead of an import error.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import venv
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path
from zipfile import ZipFile

import httpx
import pytest
from conftest import ApiServer

from tickwork.core.records import State

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
SERVER_ONLY = ("asyncpg", "fastapi", "starlette", "uvicorn", "pgserver", "prometheus_client")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(folder),
            str(ROOT),
        ],
        check=True,
    )
    [built] = folder.glob("tickwork-*.whl")
    return built


@pytest.fixture(scope="module")
def base_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A virtualenv holding ``pip install tickwork`` (no extras): its bin folder."""
    folder = tmp_path_factory.mktemp("base-venv")
    # Without a pip of its own (ensurepip was most of this fixture's time): this
    # environment's pip installs into it, as `pip --python` does for any.
    venv.create(folder, with_pip=False)
    bin_dir = folder / "bin"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(bin_dir / "python"),
            "install",
            "--quiet",
            str(wheel),
        ],
        check=True,
    )
    yield bin_dir


def test_the_wheel_requires_no_server_package(wheel: Path) -> None:
    with ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(name).decode())
    required = metadata.get_all("Requires-Dist") or []
    base = [r for r in required if "extra ==" not in r]
    assert base, "the base install needs the SDK's own dependencies"
    for requirement in base:
        assert not requirement.lower().startswith(("asyncpg", "fastapi", "uvicorn", "pgserver"))
    extras = set(metadata.get_all("Provides-Extra") or [])
    assert {"server", "embedded"} <= extras


def test_the_base_install_has_no_server_package(base_env: Path) -> None:
    probe = f"import importlib.util as u; print([m for m in {SERVER_ONLY!r} if u.find_spec(m)])"
    found = subprocess.run(
        [str(base_env / "python"), "-c", probe], check=True, capture_output=True, text=True
    )
    assert found.stdout.strip() == "[]"


def test_server_roles_name_the_extras_to_install(base_env: Path) -> None:
    result = subprocess.run(
        [str(base_env / "tickwork"), "dev", "--port", "0"], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "pip install 'tickwork[server,embedded]'" in result.stderr
    assert "Traceback" not in result.stderr
    listing = subprocess.run(
        [str(base_env / "tickwork"), "--help"], capture_output=True, text=True, check=True
    )
    assert "dispatcher" in listing.stdout and "needs tickwork[server]" in listing.stdout


WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from tickwork.worker import RunContext, Worker

    async def main() -> None:
        done = asyncio.Event()
        worker = Worker(sys.argv[1], sys.argv[2], queues=["default"], wait_seconds=1,
                        on_result=lambda result: done.set())

        @worker.handler(job="lean")
        async def lean(ctx: RunContext) -> None:
            print("ran", ctx.run_id, ctx.payload["n"], flush=True)

        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(done.wait(), 20)
        worker.stop()
        await task
        print("loaded", sorted(m for m in sys.modules if m.split(".")[0] in SERVER_ONLY))

    asyncio.run(main())
    """
).replace("SERVER_ONLY", repr(SERVER_ONLY))


async def run_in(base_env: Path, script: str, *args: str) -> list[str]:
    """Run ``script`` on the base install's Python, without the source tree on its path;
    the lines it printed (it must succeed)."""
    process = await asyncio.create_subprocess_exec(
        str(base_env / "python"),
        "-c",
        script,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": ""},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    return stdout.decode().splitlines()


async def test_a_worker_runs_from_the_base_install(base_env: Path, api_server: ApiServer) -> None:
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as http:
        assert (await http.put("/v1/jobs/lean", json={})).status_code == 201
        response = await http.post("/v1/jobs/lean/runs", json={"payload": {"n": 7}})
        run_id = response.json()["runId"]
    lines = await run_in(base_env, WORKER, api_server.url, api_server.worker_token)
    assert f"ran {run_id} 7" in lines
    assert "loaded []" in lines
    run, _ = await api_server.jobs.run(run_id)
    assert run.state is State.succeeded


APPLICATION = textwrap.dedent(
    """
    import sys
    from tickwork.client import Client, NotFound
    from tickwork.testing import run_handler

    with Client(sys.argv[1], sys.argv[2]) as tickwork:
        run = tickwork.enqueue("lean", {"n": 8})
        print("enqueued", run.run_id, tickwork.get_run(run.run_id).state, flush=True)
        try:
            tickwork.get_run("r0-999999")
        except NotFound:
            print("not found", flush=True)
    print("handler", run_handler(lambda ctx: ctx.payload["n"], {"n": 9}).returned)
    print("loaded", sorted(m for m in sys.modules if m.split(".")[0] in SERVER_ONLY))
    """
).replace("SERVER_ONLY", repr(SERVER_ONLY))


async def test_an_application_enqueues_and_tests_handlers_from_the_base_install(
    base_env: Path, api_server: ApiServer
) -> None:
    headers = api_server.headers(api_server.team_token)
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as http:
        assert (await http.put("/v1/jobs/lean", json={})).status_code == 201
    lines = await run_in(base_env, APPLICATION, api_server.url, api_server.team_token)
    [enqueued] = [line for line in lines if line.startswith("enqueued ")]
    assert enqueued.endswith(" ready")
    assert lines[1:] == ["not found", "handler 9", "loaded []"]
