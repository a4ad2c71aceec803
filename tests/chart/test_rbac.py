"""The chart's RBAC is exactly what the roles use: each role runs against the emulated
API server as its ServiceAccount, and the calls it made (the emulator's audit) must be
granted by the chart, with nothing granted that no call needed."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from kube.emulator import Emulator
from kube.reviews import User

from chart import rbac
from chart.chart import NAMESPACE, name, rendered
from tickwork.api.app import create_app
from tickwork.api.review_settings import ReviewSettings
from tickwork.api.server import HttpServer
from tickwork.cli import runtime
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

DISPATCHER_TOKEN = "sa-token-of-the-dispatcher-0123456789"
WORKER_TOKEN = "sa-token-of-a-team-worker-0123456789"


async def test_the_dispatcher_is_granted_what_kubernetes_auth_calls(
    kube: Emulator, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = User.service_account(NAMESPACE, name("dispatcher"))
    kube.tokens[DISPATCHER_TOKEN] = account
    kube.tokens[WORKER_TOKEN] = User.service_account("team-a", "worker")
    worker = "system:serviceaccount:team-a:worker"
    kube.access.allow(user=worker, api_group="tickwork.dev", namespace="team-a")
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", token=DISPATCHER_TOKEN)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))

    # The dispatcher's own wiring (tickwork dispatcher --auth kubernetes), every kind
    # of authorised call once.
    async with runtime.authenticator("kubernetes", None, ReviewSettings()) as auth:
        services = runtime.api_services(Installation.over(database), auth, Metrics())
        server = HttpServer(create_app(services), port=0)
        url = await server.start()
        try:
            headers = {"Authorization": f"Bearer {WORKER_TOKEN}"}
            async with httpx.AsyncClient(base_url=url, headers=headers) as team:
                assert (await team.put("/v1/jobs/nightly", json={})).status_code == 201
                assert (await team.post("/v1/jobs/nightly/runs")).status_code == 201
                assert (await team.get("/v1/jobs")).status_code == 200
                assert (await team.get("/v1/dlq")).status_code == 200
                lease = await team.post("/v1/lease", json={"queues": ["default"]})
                assert lease.status_code == 200, lease.text
        finally:
            await server.stop()

    needed = rbac.used(kube.audit, account.username)
    assert needed, "the dispatcher made no call as its ServiceAccount"
    for values in ("minimal", "everything"):
        given = rbac.granted(rendered(values), name("dispatcher"))
        assert not rbac.covered(needed, given), f"{values}: missing"
        assert not rbac.unused(needed, given), f"{values}: granted but never used"
    # With the tokens file only, the dispatcher calls nothing and is granted nothing.
    assert not rbac.granted(rendered("namespaced"), name("dispatcher"))
