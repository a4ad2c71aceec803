"""The real ``kubectl`` against the emulator, for tests of what a person sees."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from kube import emulator

# A test module of kubectl calls: ``pytestmark = kubectl.needed``.
needed = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


async def run(kube: emulator.Emulator, *args: str) -> str:
    """``kubectl --kubeconfig <the emulator's> args...``: its output; fails the test when
    kubectl does (with its error output)."""
    process = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kube.kubeconfig),
        "--request-timeout=10s",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    return out.decode()
