"""``tickwork operator`` as a process: the contract's flags, the kubeconfig from
KUBECONFIG, /healthz and /readyz, a ScheduledJob reconciled, a clean SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket

import httpx
import pytest
from click.testing import CliRunner
from kube import emulator
from polling import eventually
from test_dev import WAIT, tickwork

from tickwork.cli import cli
from tickwork.core.settings import OperatorSettings, WebhookSettings
from tickwork.engine.jobs import Jobs
from tickwork.operator.cluster import Cluster, ClusterError
from tickwork.operator.runtime import Operator
from tickwork.store.database import Database

from .conftest import example, observed

pytestmark = pytest.mark.timeout(90)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_the_operator_serves_probes_reconciles_and_stops_on_sigterm(
    cluster_kube: emulator.Emulator, database_url: str
) -> None:
    webhook_port = free_port()
    command = (
        *("operator", "--database-url", database_url, "--shards", "4"),
        *("--namespace", "default", "--namespace", "team-a"),
        *("--webhook-port", str(webhook_port), "--webhook-bind", "127.0.0.1"),
        *("--webhook-host", "127.0.0.1", "--webhook-insecure"),
        *("--status-interval", "1", "--health-port", "0"),
    )
    env = {"KUBECONFIG": str(cluster_kube.kubeconfig)}
    async with tickwork(*command, env=env) as operator:
        health = (await operator.expect(r"health on (http://\S+)/healthz")).group(1)
        await operator.expect(r"watching ScheduledJobs")
        async with httpx.AsyncClient(base_url=health, timeout=WAIT) as http:
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            ready = await http.get("/readyz")
            assert (ready.status_code, ready.json()["status"]) == (200, "ready")
        configuration = await cluster_kube.wait_for(
            "validatingwebhookconfigurations",
            "scheduledjobs.tickwork.dev",
            lambda o: o is not None,
            timeout=WAIT,
        )
        assert configuration is not None
        assert configuration["webhooks"][0]["clientConfig"]["url"] == (
            f"http://127.0.0.1:{webhook_port}/validate"
        )
        await cluster_kube.create(example("hello"), admit=True)
        await cluster_kube.wait_for("sj", "hello", observed(1), namespace="default", timeout=WAIT)

        operator.process.send_signal(signal.SIGTERM)
        assert await operator.process.wait() == 0
    assert "Traceback" not in operator.output, operator.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give --namespace NS (repeatable) or --all-namespaces"),
        (("--namespace", "a", "--all-namespaces"), "or --all-namespaces"),
        (("--all-namespaces", "--webhook-cert", "pyproject.toml"), "go together"),
    ],
    ids=["no-scope", "both-scopes", "cert-without-key"],
)
def test_bad_flags_are_one_clear_line(args: tuple[str, ...], message: str) -> None:
    result = CliRunner().invoke(cli, ["operator", "--database-url", "postgresql:///x", *args])
    assert result.exit_code == 2
    assert message in result.output


async def test_without_the_crd_the_operator_says_what_to_install(
    kube: emulator.Emulator, database: Database
) -> None:
    assert kube.kubeconfig is not None
    cluster = await Cluster.connect(str(kube.kubeconfig))
    try:
        operator = Operator(
            Jobs(database),
            cluster,
            OperatorSettings(webhook=WebhookSettings(port=0), health_port=None),
        )
        with pytest.raises(ClusterError, match=r"install the CRD first \(kubectl apply -f crds/"):
            await operator.run(asyncio.Event())
    finally:
        await cluster.close()


async def test_two_operator_processes_elect_one_leader_and_hand_over_on_sigterm(
    cluster_kube: emulator.Emulator, database_url: str
) -> None:
    await cluster_kube.create_namespace("tickwork")

    def command(identity: str) -> tuple[str, ...]:
        return (
            *("operator", "--database-url", database_url, "--shards", "4"),
            *("--namespace", "default", "--namespace", "team-a"),
            *("--webhook-port", str(free_port()), "--webhook-bind", "127.0.0.1"),
            *("--webhook-host", "127.0.0.1", "--webhook-insecure"),
            *("--status-interval", "1", "--health-port", "0"),
            *("--leader-election", "--lease-namespace", "tickwork", "--identity", identity),
            *("--lease-seconds", "2"),
        )

    env = {"KUBECONFIG": str(cluster_kube.kubeconfig)}
    async with tickwork(*command("first"), env=env) as first:
        await first.expect(r"first leads \(Lease tickwork-operator, term 1\)")
        await first.expect(r"watching ScheduledJobs")
        async with tickwork(*command("second"), env=env) as second:
            health = (await second.expect(r"health on (http://\S+)/healthz")).group(1)
            await second.expect(r"serving admission")
            async with httpx.AsyncClient(base_url=health, timeout=WAIT) as http:

                async def ready() -> bool:
                    answer = await http.get("/readyz")
                    if answer.status_code != 200:
                        assert answer.json()["status"] == "starting", answer.text
                    return answer.status_code == 200

                # Ready once its first try for the Lease went through.
                await eventually(ready, within=WAIT, what="the second ready")
                answer = await http.get("/readyz")
            assert answer.json() == {"status": "ready", "role": "standby", "identity": "second"}

            # SIGTERM: the leader stops its handlers, releases the Lease, exits 0.
            first.process.send_signal(signal.SIGTERM)
            assert await first.process.wait() == 0
            await second.expect(r"second leads \(Lease tickwork-operator, term 1\)")
            await second.expect(r"watching ScheduledJobs")
            await cluster_kube.create(example("hello"), admit=True)
            await cluster_kube.wait_for(
                "sj", "hello", observed(1), namespace="default", timeout=WAIT
            )
            lease = cluster_kube.get("leases", "tickwork-operator", "tickwork")
            assert lease is not None
            assert lease["spec"]["holderIdentity"] == "second"

            second.process.send_signal(signal.SIGTERM)
            assert await second.process.wait() == 0
        lease = cluster_kube.get("leases", "tickwork-operator", "tickwork")
        assert lease is not None
        assert "holderIdentity" not in lease["spec"]  # released
    for process in (first, second):
        assert "Traceback" not in process.output, process.output
