"""A real Prometheus (Debian's prometheus package) scrapes the API, the scheduler and
the dispatcher in one process, as ``tickwork dev`` runs them: every query of the Grafana
dashboard and every series an alert reads return series, the alerts on ``up`` stay
silent while everything is up, and Prometheus evaluates every rule without an error.

The app is served in-process on 127.0.0.1 with an injected clock (the canary's lag is
judged a minute after it is due: the clock moves that minute, the test does not wait
it). Prometheus scrapes every second with a metrics token read from a file, under the
job names the chart's ServiceMonitor gives (one per role, both on this process)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import promql_parser
import pytest
import yaml
from conftest import TEAM_TOKEN, WORKER_TOKEN, served

from monitoring import rules
from monitoring.support import lease_and_succeed, prometheus_tool
from monitoring.test_alert_rules import DASHBOARD, selectors
from tickwork.api.auth import Role, StaticTokens, TokenEntry
from tickwork.api.services import Services
from tickwork.core.clock import FrozenClock
from tickwork.core.settings import ApiSettings
from tickwork.engine import canary
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.engine.observer import ShardObserver
from tickwork.engine.scheduler import Scheduler
from tickwork.store.database import Database

METRICS_TOKEN = "prometheus-scrape-token-0123456789"
# What the chart's ServiceMonitor gives: the Service's name, the release's namespace.
JOBS = ("tw-tickwork-dispatcher", "tw-tickwork-scheduler")
NAMESPACE = "tickwork"
DEADLINE_SECONDS = 15.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def prometheus(folder: Path, target: str) -> AsyncIterator[str]:
    """Prometheus scraping ``target`` every second, with the chart's rules: its URL."""
    (folder / "token").write_text(METRICS_TOKEN)
    rules.write(folder / "rules.yaml")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            {
                "job_name": job,
                "authorization": {"credentials_file": str(folder / "token")},
                "static_configs": [
                    {"targets": [target], "labels": {"namespace": NAMESPACE, "pod": f"{job}-0"}}
                ],
            }
            for job in JOBS
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        prometheus_tool("prometheus"),
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()  # its data is thrown away: no need for a clean shutdown
        _, errors = await process.communicate()
        print(errors.decode())  # shown when the test fails


async def serve_data(database: Database, clock: FrozenClock, services: Services, url: str) -> None:
    """What a minute of a small install leaves in the metrics: a readiness probe, a
    critical run enqueued, leased and completed over HTTP, another waiting in a queue no
    worker leases, the canaries completed and judged."""
    team = {"Authorization": f"Bearer {TEAM_TOKEN}"}
    worker = {"Authorization": f"Bearer {WORKER_TOKEN}"}
    async with httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/readyz")).status_code == 200  # as the kubelet probes
        for name, queue in (("settle", "billing"), ("nightly", "reports")):
            job = {"queue": queue, "priority": "critical"}
            answer = await http.put(f"/v1/jobs/{name}", json=job, headers=team)
            assert answer.status_code == 201, answer.text
            answer = await http.post(f"/v1/jobs/{name}/runs", json={}, headers=team)
            assert answer.status_code == 201, answer.text
        await lease_and_succeed(http, "billing", worker)
    scheduler = Scheduler(
        database, clock=clock, metrics=services.metrics, observer=ShardObserver(services.metrics)
    )
    await scheduler.pass_once()  # the minute's canaries, the backlog
    assert await canary.complete_ready(services.dispatcher, "canary") == database.shard_count
    clock.advance(61)
    await scheduler.pass_once()  # the last minute's canaries judged: their lag


def _selector_query(selector: Any) -> str:
    """The series a selector reads now, without its range or offset."""
    operators = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}
    matchers = [
        f"{m.name}{operators[str(m.op).rpartition('.')[2]]}{json.dumps(m.value)}"
        for m in selector.matchers.matchers
    ]
    return f"{selector.name or ''}{{{', '.join(matchers)}}}"


async def _failures(http: httpx.AsyncClient) -> list[str]:
    failures = []

    async def series(query: str) -> list[Any]:
        answer = await http.get("/api/v1/query", params={"query": query})
        assert answer.status_code == 200, f"{query}: {answer.text}"
        found: list[Any] = answer.json()["data"]["result"]
        return found

    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            if not await series(target["expr"]):
                failures.append(f"panel {panel['title']!r}: {target['expr']}")
    for name, alert in rules.alerts().items():
        expression = promql_parser.parse(alert["expr"])
        absent = alert["expr"].lstrip().startswith("absent(")
        if absent and (found := await series(alert["expr"])):
            failures.append(f"alert {name} fires while everything is up: {found}")
        for selector in selectors(expression):
            query = _selector_query(selector)
            if not await series(query):
                failures.append(f"alert {name} reads nothing from {query}")
    answer = await http.get("/api/v1/rules")
    for group in answer.json()["data"]["groups"]:
        for rule in group["rules"]:
            if rule["health"] != "ok":
                failures.append(f"rule {rule['name']}: {rule['health']} {rule.get('lastError')}")
    return failures


# Prometheus applies its targets about 5 s after it starts, and rate() needs two scrapes:
# about 7 s of waiting.
@pytest.mark.slow
async def test_every_panel_and_alert_reads_series_from_a_running_install(
    database: Database, clock: FrozenClock, tmp_path: Path
) -> None:
    prometheus_tool("prometheus")
    metrics = Metrics()
    tokens = StaticTokens(
        [
            TokenEntry(token=TEAM_TOKEN, tenant="acme", role=Role.team),
            TokenEntry(token=WORKER_TOKEN, tenant="acme", role=Role.worker, queues=["billing"]),
            TokenEntry(token=METRICS_TOKEN, tenant="platform", role=Role.metrics),
        ]
    )
    services = Services(
        engine=Installation.over(database, clock=clock),
        authenticator=tokens,
        metrics=metrics,
        settings=ApiSettings(auth_failure_rate=0),
    )
    async with served(services) as url:
        await serve_data(database, clock, services, url)
        target = url.removeprefix("http://")
        async with prometheus(tmp_path, target) as base, httpx.AsyncClient(base_url=base) as http:
            deadline = time.monotonic() + DEADLINE_SECONDS
            failures = ["Prometheus did not answer"]
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.TransportError):
                    ready = await http.get("/-/ready")
                    if ready.status_code == 200:
                        failures = await _failures(http)
                        if not failures:
                            break
                await asyncio.sleep(0.25)  # the next scrape, every second
            assert failures == []
