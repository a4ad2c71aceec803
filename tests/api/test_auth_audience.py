"""The audience a ServiceAccount token must be issued for (``--auth-audience``): by
default ``tickwork``, so a pod's own token, issued for the API server, is refused; it
passes only once the API server's audience is named."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator

import click
import httpx
import pytest
from click.testing import CliRunner
from conftest import served
from kube.emulator import Emulator
from kube.reviews import User

from tickwork.api.review_settings import ReviewSettings
from tickwork.cli import options, roles, runtime
from tickwork.core.settings import DispatcherSettings, KubernetesAuthSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

API_SERVER = "https://kubernetes.default.svc"
# A pod's default token: valid for the API server only.
POD_TOKEN = "sa-token-for-the-api-server-0123456789"
# A projected token with audience tickwork: the API server itself does not take it.
PROJECTED_TOKEN = "sa-token-for-tickwork-0123456789"
UNAUTHENTICATED = "https://tickwork.dev/problems/unauthenticated"


@contextlib.asynccontextmanager
async def dispatcher(
    kube: Emulator, database: Database, reviews: ReviewSettings
) -> AsyncIterator[httpx.AsyncClient]:
    """The dispatcher's wiring for ``--auth kubernetes``, and a client without a token."""
    async with runtime.authenticator("kubernetes", None, reviews) as auth:
        services = runtime.api_services(Installation.over(database), auth, Metrics())
        async with served(services) as url, httpx.AsyncClient(base_url=url) as client:
            yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def cluster(kube: Emulator, monkeypatch: pytest.MonkeyPatch) -> Emulator:
    worker = User.service_account("team-a", "worker")
    kube.tokens[POD_TOKEN] = dataclasses.replace(worker, audiences=(API_SERVER,))
    kube.tokens[PROJECTED_TOKEN] = dataclasses.replace(worker, audiences=("tickwork",))
    kube.access.allow(user=worker.username, api_group="tickwork.dev", namespace="team-a")
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    return kube


def asked_audiences(kube: Emulator) -> list[list[str]]:
    return [
        list(record.body["spec"].get("audiences") or [])
        for record in kube.audit
        if record.verb == "create" and record.resource == "tokenreviews"
    ]


async def test_a_token_for_the_api_server_is_refused_by_default(
    cluster: Emulator, database: Database
) -> None:
    reviews = options.review_settings(DispatcherSettings().kubernetes)
    async with dispatcher(cluster, database, reviews) as client:
        refused = await client.get("/v1/jobs", headers=bearer(POD_TOKEN))
        assert refused.status_code == 401, refused.text
        assert refused.json()["type"] == UNAUTHENTICATED
        accepted = await client.get("/v1/jobs", headers=bearer(PROJECTED_TOKEN))
        assert accepted.status_code == 200, accepted.text
    assert asked_audiences(cluster) == [["tickwork"], ["tickwork"]]


async def test_naming_the_api_servers_audience_accepts_its_tokens(
    cluster: Emulator, database: Database
) -> None:
    settings = KubernetesAuthSettings(audiences=("tickwork", API_SERVER))
    async with dispatcher(cluster, database, options.review_settings(settings)) as client:
        for token in (POD_TOKEN, PROJECTED_TOKEN):
            answer = await client.get("/v1/jobs", headers=bearer(token))
            assert answer.status_code == 200, answer.text
    assert asked_audiences(cluster) == [["tickwork", API_SERVER]] * 2


def test_the_command_line_defaults_to_tickwork_and_refuses_no_audience() -> None:
    assert ReviewSettings().audiences == ("tickwork",)
    assert KubernetesAuthSettings().audiences == ("tickwork",)
    command = roles.dispatcher
    with command.make_context("dispatcher", []) as context:
        assert options.load(DispatcherSettings, context.params).kubernetes.audiences == (
            "tickwork",
        )
    given = ["--auth-audience", "tickwork", "--auth-audience", API_SERVER]
    with command.make_context("dispatcher", given) as context:
        settings = options.load(DispatcherSettings, context.params)
        assert settings.kubernetes.audiences == ("tickwork", API_SERVER)
    runner = CliRunner(env={"TICKWORK_AUTH_AUDIENCE": f"tickwork {API_SERVER}"})
    with runner.isolation(), command.make_context("dispatcher", []) as context:
        settings = options.load(DispatcherSettings, context.params)
        assert settings.kubernetes.audiences == ("tickwork", API_SERVER)
    with (
        pytest.raises(click.UsageError, match="at least one audience"),
        command.make_context("dispatcher", ["--auth-audience", ""]) as context,
    ):
        options.load(DispatcherSettings, context.params)
