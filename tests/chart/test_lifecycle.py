"""The chart's hook Jobs run against the emulated API server as the chart runs them
(their arguments from a render, as their own ServiceAccount): the secrets hook draws
each Secret once and keeps it, and adopts an older chart's; the certificate it draws is
one the API server trusts for the webhook's Service; the uninstall hook waits until no
operator leads, then releases the finalizers so namespaces can go. What each calls is
what the chart grants it, and no more."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kube.emulator import Emulator
from kube.reviews import User

from chart import rbac
from chart.chart import NAMESPACE, RELEASE, Rendered, name, render, rendered
from tickwork.core.settings import WebhookSettings
from tickwork.operator import crd, lifecycle
from tickwork.operator.cluster import Cluster
from tickwork.operator.handlers import FINALIZER
from tickwork.operator.runtime import webhook_server

BUNDLED = {"postgresql": {"enabled": True}}


def _hook_args(document: Rendered, hook: str) -> list[str]:
    [job] = [j for j in document.hooks() if j["kind"] == "Job" and j["metadata"]["name"] == hook]
    [container] = job["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args


@contextlib.asynccontextmanager
async def _as(kube: Emulator, tmp_path: Path, account: str) -> AsyncIterator[Cluster]:
    """A client of the emulator as the release's ServiceAccount ``account``."""
    token = f"sa-token-of-{account}-0123456789"
    kube.tokens[token] = User.service_account(NAMESPACE, account)
    kubeconfig = kube.write_kubeconfig(tmp_path / f"kubeconfig-{account}", token=token)
    cluster = await Cluster.connect(str(kubeconfig))
    try:
        yield cluster
    finally:
        await cluster.close()


def _data(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def per_secret(*, database: str, ui: str, webhook: str) -> dict[str, str]:
    """What the secrets hook answers it did, by Secret of the release."""
    return {name("database"): database, name("ui"): ui, name("webhook-tls"): webhook}


async def test_the_secrets_hook_draws_each_secret_once_and_keeps_it(
    kube: Emulator, tmp_path: Path
) -> None:
    await kube.create_namespace(NAMESPACE)
    document = render(BUNDLED)
    args = lifecycle.parser().parse_args(_hook_args(document, name("secrets")))
    wanted = lifecycle.wanted_of(args)
    account = name("secrets")
    async with _as(kube, tmp_path, account) as cluster:
        done = await lifecycle.ensure_secrets(cluster.api, NAMESPACE, RELEASE, wanted)
        assert done == per_secret(database="created", ui="created", webhook="created")
        first = {n: kube.get("secrets", n, NAMESPACE) for n in done}

        # The next upgrade (or Argo CD sync) changes nothing: not a single write.
        writes = kube.count("create", "secrets") + kube.count("patch", "secrets")
        again = await lifecycle.ensure_secrets(cluster.api, NAMESPACE, RELEASE, wanted)
        assert set(again.values()) == {"kept"}
        assert kube.count("create", "secrets") + kube.count("patch", "secrets") == writes
        assert {n: kube.get("secrets", n, NAMESPACE) for n in done} == first

    database = first[name("database")]
    password = _data(database)["postgres-password"]
    assert len(password) == 32 and password.isalnum()
    host = f"{name('postgresql')}.{NAMESPACE}.svc"
    assert _data(database)["urls"] == f"postgresql://tickwork:{password}@{host}:5432/tickwork"
    # What the roles and the bundled PostgreSQL read from it.
    postgres = document.one("StatefulSet", name("postgresql"))["spec"]["template"]["spec"]
    [env] = [e for e in postgres["containers"][0]["env"] if e["name"] == "POSTGRES_PASSWORD"]
    assert env["valueFrom"]["secretKeyRef"] == {
        "name": name("database"),
        "key": lifecycle.PASSWORD_KEY,
    }
    assert len(_data(first[name("ui")])["secret"]) >= 32
    assert first[name("webhook-tls")]["type"] == "kubernetes.io/tls"
    for secret in first.values():
        labels, annotations = secret["metadata"]["labels"], secret["metadata"]["annotations"]
        # Argo CD claims (and prunes) what carries its tracking label: not these.
        assert "app.kubernetes.io/instance" not in labels
        assert labels[lifecycle.RELEASE_LABEL] == RELEASE
        assert lifecycle.KEEP.items() <= annotations.items()
        assert annotations["meta.helm.sh/release-name"] == RELEASE

    # Chart 0.1.0 rendered the database Secret (randAlphaNum and lookup): it is adopted
    # as it is, annotated so the upgrade that stops rendering it does not delete it.
    await kube.delete("secrets", name("database"), namespace=NAMESPACE)
    old = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name("database"),
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/instance": RELEASE,
                "app.kubernetes.io/managed-by": "Helm",
            },
            "annotations": {"meta.helm.sh/release-name": RELEASE},
        },
        "data": {
            "urls": base64.b64encode(b"postgresql://tickwork:old@h:5432/tickwork").decode(),
            "postgres-password": base64.b64encode(b"old").decode(),
        },
    }
    await kube.create(old)
    # And its webhook certificate, the same way (its CA is in the webhook's caBundle).
    tls = kube.get("secrets", name("webhook-tls"), NAMESPACE)
    assert tls is not None
    await kube.delete("secrets", name("webhook-tls"), namespace=NAMESPACE)
    await kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name("webhook-tls"), "namespace": NAMESPACE},
            "data": tls["data"],
        }
    )
    # A session secret too short to use is completed; the rest of it stays.
    await kube.patch(
        "secrets",
        name("ui"),
        {"data": {"secret": base64.b64encode(b"short").decode()}},
        namespace=NAMESPACE,
    )
    async with _as(kube, tmp_path, account) as cluster:
        done = await lifecycle.ensure_secrets(cluster.api, NAMESPACE, RELEASE, wanted)
    assert done == per_secret(database="adopted", ui="completed", webhook="adopted")
    webhook = kube.get("secrets", name("webhook-tls"), NAMESPACE)
    assert webhook is not None and webhook["data"] == tls["data"]
    adopted = kube.get("secrets", name("database"), NAMESPACE)
    assert adopted is not None
    assert _data(adopted) == _data(old)
    assert lifecycle.KEEP.items() <= adopted["metadata"]["annotations"].items()
    completed = kube.get("secrets", name("ui"), NAMESPACE)
    assert completed is not None and len(_data(completed)["secret"]) >= 32

    needed = rbac.used(kube.audit, User.service_account(NAMESPACE, account).username)
    given = rbac.granted(document, account)
    rbac.check_exact(needed, given)
    assert ("", "secrets", "patch", NAMESPACE, "") not in given  # only its own Secrets


async def test_the_drawn_certificate_is_served_and_trusted_for_the_webhook_service(
    tmp_path: Path,
) -> None:
    """The operator serves the hook's pair and hands out its CA, which verifies the
    Service's name as the API server dials it (and no other name)."""
    service = name("webhook")
    files = lifecycle.certificate(service, NAMESPACE)
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    settings = WebhookSettings(
        port=None,
        bind="127.0.0.1",
        cert_file=tmp_path / "tls.crt",
        key_file=tmp_path / "tls.key",
        ca_file=tmp_path / "ca.crt",
    )

    async def refuse_nothing(*_: Any, **__: Any) -> dict[str, Any]:
        return {}

    served = webhook_server(settings)(refuse_nothing)
    try:
        client_config = await anext(served)
        ca = base64.b64decode(client_config["caBundle"]).decode()
        assert ca == files["ca.crt"]
        port = int(client_config["url"].rsplit(":", 1)[1].split("/")[0])

        async def handshake(server_name: str) -> None:
            context = ssl.create_default_context(cadata=ca)
            _, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname=server_name
            )
            writer.close()
            await writer.wait_closed()

        for dialled in lifecycle.service_names(service, NAMESPACE):
            await handshake(dialled)
        with pytest.raises(ssl.SSLCertVerificationError):
            await handshake(f"elsewhere.{NAMESPACE}.svc")
    finally:
        await served.aclose()


# --- uninstall ---


class Clock:
    """The hook's clock and sleep: each poll moves time on by its interval."""

    def __init__(self) -> None:
        self.at = dt.datetime.now(dt.UTC)
        self.polls = 0
        self.each: Any = None  # called with the poll number after each sleep

    def now(self) -> dt.datetime:
        return self.at

    async def sleep(self, seconds: float) -> None:
        self.at += dt.timedelta(seconds=seconds)
        self.polls += 1
        if self.each is not None:
            await self.each(self.polls)


def _lease(holder: str | None, renewed: dt.datetime) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "leaseDurationSeconds": 10,
        "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }
    if holder is not None:
        spec["holderIdentity"] = holder
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "tickwork-operator", "namespace": NAMESPACE},
        "spec": spec,
    }


async def test_the_uninstall_hook_waits_for_no_leader_a_whole_lease(
    kube: Emulator, tmp_path: Path
) -> None:
    await kube.create_namespace(NAMESPACE)
    clock = Clock()
    await kube.create(_lease("operator-0", clock.at))

    async def leader_stops(poll: int) -> None:
        if poll == 3:  # SIGTERM: the leader releases its Lease
            await kube.patch(
                "leases",
                "tickwork-operator",
                {"spec": {"holderIdentity": None}},
                namespace=NAMESPACE,
            )
            clock.released = clock.at  # type: ignore[attr-defined]

    clock.each = leader_stops
    async with _as(kube, tmp_path, name("uninstall")) as cluster:
        await lifecycle.wait_until_no_leader(
            cluster.api, NAMESPACE, now=clock.now, sleep=clock.sleep
        )
        # Free for a whole lease duration, in which a standby left would have taken it.
        assert clock.at - clock.released >= dt.timedelta(seconds=10)  # type: ignore[attr-defined]
        assert clock.polls <= 15

        # A leader that keeps renewing: the hook gives up, saying so.
        async def renewing(_: int) -> None:
            await kube.patch(
                "leases",
                "tickwork-operator",
                {"spec": _lease("operator-1", clock.at)["spec"]},
                namespace=NAMESPACE,
            )

        clock.each = renewing
        with pytest.raises(lifecycle.StillLeading, match="operator-1"):
            await lifecycle.wait_until_no_leader(
                cluster.api, NAMESPACE, patience=5, now=clock.now, sleep=clock.sleep
            )
        # A leader that died: its Lease expires, and then counts as free.
        clock.each = None
        await lifecycle.wait_until_no_leader(
            cluster.api, NAMESPACE, now=clock.now, sleep=clock.sleep
        )
        # No Lease at all: no operator ever led.
        await kube.delete("leases", "tickwork-operator", namespace=NAMESPACE)
        polls = clock.polls
        await lifecycle.wait_until_no_leader(
            cluster.api, NAMESPACE, now=clock.now, sleep=clock.sleep
        )
        assert clock.polls == polls


def _job(namespace: str, job: str, *finalizers: str) -> dict[str, Any]:
    return {
        "apiVersion": "tickwork.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": job, "namespace": namespace, "finalizers": list(finalizers)},
        "spec": {"schedule": {"cron": "0 3 * * *"}},
    }


async def test_the_uninstall_hook_releases_the_finalizers_so_namespaces_can_go(
    kube: Emulator, tmp_path: Path
) -> None:
    """After the operator is gone: a namespace deleted with ScheduledJobs in it goes,
    another controller's finalizer stays, namespaces the release did not serve are left
    alone; the calls are what the chart grants the hook, namespaced or cluster-wide."""
    await kube.create(crd.definition())
    for namespace in (NAMESPACE, "team-a", "team-b", "elsewhere"):
        await kube.create_namespace(namespace)
    await kube.create(_job("team-a", "a1", FINALIZER))
    await kube.create(_job("team-a", "a2", FINALIZER))
    await kube.create(_job("team-b", "b1", "example.com/keep", FINALIZER))
    await kube.create(_job("elsewhere", "e1", FINALIZER))
    await kube.delete("namespaces", "team-a")
    assert kube.get("namespaces", "team-a") is not None  # stuck on the finalizers

    account = name("uninstall")
    user = User.service_account(NAMESPACE, account).username
    namespaced = render({**rendered("namespaced").values})
    args = lifecycle.parser().parse_args(_hook_args(namespaced, account))
    assert args.namespaces == ["team-a", "team-b"]
    kube.fail("patch", "scheduledjobs", code=409, times=1)  # someone else's write first
    async with _as(kube, tmp_path, account) as cluster:
        await lifecycle.wait_until_no_leader(cluster.api, args.lease_namespace)
        released = await lifecycle.release_finalizers(cluster.api, args.namespaces)
        assert released == 3
        await kube.wait_until(lambda: kube.get("namespaces", "team-a") is None, timeout=5)
        b1 = kube.get("sj", "b1", "team-b")
        assert b1 is not None and b1["metadata"]["finalizers"] == ["example.com/keep"]
        e1 = kube.get("sj", "e1", "elsewhere")
        assert e1 is not None and e1["metadata"]["finalizers"] == [FINALIZER]
        needed = rbac.used(kube.audit, user)
        given = rbac.granted(namespaced, account)
        rbac.check_exact(needed, given, "namespaced")

        # Serving every namespace (the default): every ScheduledJob of the cluster.
        start = len(kube.audit)
        default = render(rendered("minimal").values)
        args = lifecycle.parser().parse_args(_hook_args(default, account))
        assert args.namespaces == []
        assert await lifecycle.release_finalizers(cluster.api, args.namespaces) == 1
        assert kube.get("sj", "e1", "elsewhere")["metadata"].get("finalizers") in (None, [])  # type: ignore[index]
        needed = rbac.used(kube.audit[start:], user)
        given = rbac.granted(default, account)
        assert not rbac.covered(needed, given), "every namespace: missing"
        assert {p[:3] for p in needed} == {
            ("tickwork.dev", "scheduledjobs", verb) for verb in ("list", "patch")
        }
        assert {p[:3] for p in given} == {
            ("tickwork.dev", "scheduledjobs", verb) for verb in ("get", "list", "patch")
        } | {("coordination.k8s.io", "leases", "get")}
