"""Whom the dispatcher believes about the scheme (``--forwarded-allow-ips``): the
dashboard's Secure cookie and its Origin check read it, so ``X-Forwarded-Proto`` counts
only from the proxies named, whatever uvicorn's own environment variable says.

The client picks its source address on the loopback network (127.0.0.2 is a peer
other than 127.0.0.1 on the same host), so one server sees a trusted and an untrusted
peer."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import conftest
import httpx
import pytest
from conftest import TEAM_TOKEN

from tickwork.api.services import Services
from tickwork.core.settings import ApiSettings, DispatcherSettings, EdgeSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

PROXY = "127.0.0.1"
STRANGER = "127.0.0.2"
FORWARDED_HTTPS = {"X-Forwarded-Proto": "https"}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@contextlib.asynccontextmanager
async def serving(database: Database, *trusted: str) -> AsyncIterator[str]:
    services = Services(
        engine=Installation.over(database),
        authenticator=conftest.test_tokens(),
        metrics=Metrics(),
        settings=ApiSettings(ui_secret="proxy-test-secret-" + "x" * 32),
    )
    limits = EdgeSettings(forwarded_allow_ips=trusted)
    async with conftest.served(services, limits) as url:
        yield url


def client(url: str, source: str, **headers: str) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(local_address=source)
    return httpx.AsyncClient(base_url=url, transport=transport, headers=headers)


def is_secure(answer: httpx.Response) -> bool:
    cookies = answer.headers.get_list("set-cookie")
    assert cookies, "the sign-in form sets its cookie"
    flags = [{p.strip().lower() for p in c.split(";")} for c in cookies]
    assert len({"secure" in f for f in flags}) == 1
    return "secure" in flags[0]


async def sign_in(session: httpx.AsyncClient, origin: str) -> httpx.Response:
    form = await session.get("/ui/login")
    found = CSRF.search(form.text)
    assert found, "no CSRF field on the sign-in form"
    # Passed by hand: the client's jar keeps a Secure cookie off a plain-HTTP URL, and
    # here the proxy's leg is plain HTTP.
    cookie = "; ".join(c.split(";")[0] for c in form.headers.get_list("set-cookie"))
    return await session.post(
        "/ui/login",
        data={"token": TEAM_TOKEN, "csrf": found.group(1), "next": "/ui/"},
        headers={"Origin": origin, "Cookie": cookie},
    )


async def test_forwarded_https_counts_only_from_a_trusted_proxy(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvicorn's own variable must not widen what the dispatcher was told.
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")
    async with serving(database, PROXY) as url:
        async with client(url, PROXY, **FORWARDED_HTTPS) as proxy:
            assert is_secure(await proxy.get("/ui/login"))
        async with client(url, STRANGER, **FORWARDED_HTTPS) as stranger:
            assert not is_secure(await stranger.get("/ui/login"))
        async with client(url, PROXY) as direct:
            assert not is_secure(await direct.get("/ui/login"))


async def test_a_network_of_proxies_and_nobody(database: Database) -> None:
    async with (
        serving(database, "127.0.0.0/30") as url,
        client(url, STRANGER, **FORWARDED_HTTPS) as proxy,
    ):
        assert is_secure(await proxy.get("/ui/login"))
    async with (
        serving(database) as url,  # trust nobody: the header is ignored
        client(url, PROXY, **FORWARDED_HTTPS) as proxy,
    ):
        assert not is_secure(await proxy.get("/ui/login"))


async def test_the_origin_check_reads_the_trusted_scheme_only(database: Database) -> None:
    """A browser behind a TLS proxy sends ``Origin: https://host``: the sign-in passes
    from the trusted proxy, and a stranger claiming HTTPS is held to plain HTTP."""
    async with serving(database, PROXY) as url:
        host = url.removeprefix("http://")
        async with client(url, PROXY, **FORWARDED_HTTPS) as proxy:
            answer = await sign_in(proxy, f"https://{host}")
            assert answer.status_code == 303, answer.text
            assert is_secure(answer)
        async with client(url, STRANGER, **FORWARDED_HTTPS) as stranger:
            answer = await sign_in(stranger, f"https://{host}")
            assert answer.status_code == 403
            assert "tickwork_session" not in answer.headers.get("set-cookie", "")
            # What it really speaks, plain HTTP, is its origin: that one passes.
            answer = await sign_in(stranger, f"http://{host}")
            assert answer.status_code == 303, answer.text
            assert not is_secure(answer)


def test_the_default_trusts_loopback_and_bad_addresses_are_refused() -> None:
    assert DispatcherSettings().edge.forwarded_allow_ips == ("127.0.0.1", "::1")
    given = EdgeSettings(forwarded_allow_ips=("10.0.0.0/8,192.168.1.1", "fd00::/8"))
    assert given.forwarded_allow_ips == ("10.0.0.0/8", "192.168.1.1", "fd00::/8")
    assert EdgeSettings(forwarded_allow_ips=("",)).forwarded_allow_ips == ()
    for bad, why in (
        ("10.0.0.1/8", "host bits set"),
        ("proxy.internal", "does not appear to be an IPv4 or IPv6 address"),
        ("*,10.0.0.1", "stands alone"),
    ):
        with pytest.raises(ValueError, match=why):
            EdgeSettings(forwarded_allow_ips=(bad,))
