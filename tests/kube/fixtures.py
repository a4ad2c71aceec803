"""The ``kube`` pytest fixture: an emulated API server on 127.0.0.1, port 0.

Import it into a ``conftest.py`` (``tests/conftest.py`` does) to use it anywhere::

    async def test_lease(kube):
        await kube.create_namespace("tickwork")
        ...  # point the client at kube.url or kube.kubeconfig
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kube import emulator


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[emulator.Emulator]:
    async with emulator.serve() as server:
        server.kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        yield server
    # An exception inside the emulator is a bug of the test tool, never a pass.
    assert not server.internal_errors, "\n".join(server.internal_errors)
