"""What the monitoring tests share: Prometheus' own programs, and a run taken through
the worker's calls for the metrics to count."""

from __future__ import annotations

import os
import shutil

import httpx
import pytest


def prometheus_tool(name: str) -> str:
    """The path of ``name`` (prometheus, promtool); the test is skipped without it, and
    fails on CI, which must have it."""
    found = shutil.which(name)
    if found is None:
        reason = f"no {name}: install Debian's prometheus package (apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


async def lease_and_succeed(http: httpx.AsyncClient, queue: str, worker: dict[str, str]) -> str:
    """Lease the one ready run of ``queue`` and complete it as succeeded: its id."""
    leased = await http.post("/v1/lease", json={"queues": [queue]}, headers=worker)
    [granted] = leased.json()["leases"]
    done = await http.post(
        f"/v1/runs/{granted['runId']}/complete",
        json={"fencingToken": granted["fencingToken"], "outcome": "succeeded"},
        headers=worker,
    )
    assert done.status_code == 200, done.text
    return str(granted["runId"])
