"""Failed authentications are throttled per client address: tokens cannot be guessed at
network speed, and unknown tokens are not multiplied into TokenReviews."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import conftest
import httpx
import pytest
from conftest import ADMIN_TOKEN, TEAM_TOKEN
from kube.emulator import Emulator
from kube.reviews import User

from api.clients import PROBLEMS, HandClock
from tickwork.api import kubernetes_auth
from tickwork.api.auth import FirstMatch
from tickwork.api.review_settings import ReviewSettings
from tickwork.api.services import Services
from tickwork.api.throttle import FailureThrottle, address_key
from tickwork.core.errors import TooManyAuthFailures
from tickwork.core.settings import ApiSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

BURST = 3
SA_TOKEN = "sa-token-team-a-worker-0123456789"


def test_a_burst_of_failures_then_one_per_refill() -> None:
    clock = HandClock(100.0)
    throttle = FailureThrottle(rate=0.5, burst=BURST, clock=clock)
    for _ in range(BURST):
        throttle.check("192.0.2.7")
        throttle.failed("192.0.2.7")
    with pytest.raises(TooManyAuthFailures) as refused:
        throttle.check("192.0.2.7")
    assert refused.value.retry_after == pytest.approx(2.0)
    throttle.check("192.0.2.8")  # another address is not held up
    clock.now += 2.0
    throttle.check("192.0.2.7")  # one more failure may be made...
    throttle.failed("192.0.2.7")
    with pytest.raises(TooManyAuthFailures):
        throttle.check("192.0.2.7")  # ...and no second
    clock.now += 60
    for _ in range(BURST):  # refilled to the burst, never past it
        throttle.check("192.0.2.7")
        throttle.failed("192.0.2.7")
    with pytest.raises(TooManyAuthFailures):
        throttle.check("192.0.2.7")


def test_ipv6_hosts_count_per_64_and_mapped_ipv4_as_ipv4() -> None:
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::9")
    assert address_key("2001:db8:1:2::1") != address_key("2001:db8:1:3::1")
    assert address_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert address_key(None) == ""


def test_rate_zero_turns_it_off_and_the_table_is_bounded() -> None:
    off = FailureThrottle(rate=0, burst=1)
    for _ in range(10):
        off.failed("192.0.2.7")
        off.check("192.0.2.7")
    bounded = FailureThrottle(rate=0.001, burst=1, size=2)
    for host in ("192.0.2.1", "192.0.2.2", "192.0.2.3"):
        bounded.failed(host)
    bounded.check("192.0.2.1")  # the oldest was dropped: it starts afresh
    with pytest.raises(TooManyAuthFailures):
        bounded.check("192.0.2.3")


@pytest.fixture
async def server(database: Database) -> AsyncIterator[str]:
    services = Services(
        engine=Installation.over(database),
        authenticator=conftest.test_tokens(),
        metrics=Metrics(),
        settings=ApiSettings(auth_failure_burst=BURST, auth_failure_rate=0.01, ui_secret="s" * 40),
    )
    async with conftest.served(services) as url:
        yield url


async def test_unknown_tokens_are_refused_with_429_once_the_burst_is_spent(server: str) -> None:
    async with httpx.AsyncClient(base_url=server) as client:
        good = {"Authorization": f"Bearer {TEAM_TOKEN}"}
        for _ in range(5):  # calls that authenticate spend nothing
            assert (await client.get("/v1/jobs", headers=good)).status_code == 200
        for attempt in range(BURST):
            guess = {"Authorization": f"Bearer guess-{attempt:020d}"}
            assert (await client.get("/v1/jobs", headers=guess)).status_code == 401
        refused = await client.get("/v1/jobs", headers={"Authorization": "Bearer guess-again"})
        assert refused.status_code == 429
        assert refused.json()["type"] == PROBLEMS + "too-many-auth-failures"
        assert int(refused.headers["retry-after"]) >= 1
        # The address is held up whatever it sends, until the bucket refills; the probes
        # stay open.
        assert (await client.get("/v1/jobs", headers=good)).status_code == 429
        assert (await client.get("/healthz")).status_code == 200


async def test_failed_sign_ins_count_and_are_refused_on_the_form(server: str) -> None:
    csrf = re.compile(r'name="csrf" value="([^"]+)"')
    async with httpx.AsyncClient(base_url=server) as client:
        statuses = []
        for attempt in range(BURST + 1):
            form = await client.get("/ui/login")
            found = csrf.search(form.text)
            assert found is not None
            answer = await client.post(
                "/ui/login", data={"token": f"guess-{attempt:020d}", "csrf": found[1]}
            )
            statuses.append(answer.status_code)
        assert statuses == [401] * BURST + [429]
        assert "too many calls from this address failed to authenticate" in answer.text
        # The same address's API calls are held up too: one budget per address.
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert (await client.get("/v1/jobs", headers=admin)).status_code == 429


async def test_unknown_tokens_past_the_burst_cost_the_api_server_nothing(
    kube: Emulator, database: Database
) -> None:
    kube.tokens[SA_TOKEN] = User.service_account("team-a", "worker")
    api = await kubernetes_auth.api_client(kube.kubeconfig)
    services = Services(
        engine=Installation.over(database),
        authenticator=FirstMatch([kubernetes_auth.KubernetesAuth(api, ReviewSettings())]),
        metrics=Metrics(),
        settings=ApiSettings(auth_failure_burst=BURST, auth_failure_rate=0.01),
    )
    try:
        async with conftest.served(services) as url, httpx.AsyncClient(base_url=url) as client:
            for attempt in range(20):
                headers = {"Authorization": f"Bearer unknown-{attempt:020d}"}
                await client.get("/openapi.json", headers=headers)
    finally:
        await api.close()
    reviews = [r for r in kube.audit if r.resource == "tokenreviews" and r.verb == "create"]
    assert len(reviews) == BURST
