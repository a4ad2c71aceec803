"""The dispatcher over TLS (``--tls-cert``/``--tls-key``): a self-signed certificate
made here, the real app served with it, httpx trusting that certificate alone; the
guarded httptools protocol still bounds headers and their arrival time over TLS."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import conftest
import httpx
import pytest
from conftest import TEAM_TOKEN
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from polling import eventually

from tickwork.api.server import BadCertificate, check_tls
from tickwork.api.services import Services
from tickwork.core.settings import EdgeSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def self_signed(folder: Path, name: str = "server") -> Pair:
    """A certificate for 127.0.0.1 and localhost, signed by its own key (P-256: quick)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tickwork-test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
    pair.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pair


def trusting(pair: Pair) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pair.cert))


@contextlib.asynccontextmanager
async def serving(database: Database, limits: EdgeSettings) -> AsyncIterator[str]:
    services = Services(
        engine=Installation.over(database), authenticator=conftest.test_tokens(), metrics=Metrics()
    )
    async with conftest.served(services, limits) as url:
        yield url


async def test_the_api_answers_over_https_with_its_certificate(
    database: Database, tmp_path: Path
) -> None:
    pair = self_signed(tmp_path)
    limits = EdgeSettings(tls_cert_file=pair.cert, tls_key_file=pair.key)
    async with serving(database, limits) as url:
        assert url.startswith("https://127.0.0.1:")
        headers = {"Authorization": f"Bearer {TEAM_TOKEN}"}
        async with httpx.AsyncClient(base_url=url, verify=trusting(pair), headers=headers) as tls:
            assert (await tls.put("/v1/jobs/nightly", json={})).status_code == 201
            listed = await tls.get("/v1/jobs")
            assert listed.status_code == 200
            assert [job["name"] for job in listed.json()["items"]] == ["nightly"]
        # A client that does not trust the certificate refuses the server.
        async with httpx.AsyncClient(base_url=url) as stranger:
            with pytest.raises(httpx.ConnectError):
                await stranger.get("/healthz")
        # Plain HTTP on the TLS port is not served.
        plain = url.replace("https://", "http://")
        async with httpx.AsyncClient(base_url=plain) as cleartext:
            with pytest.raises(httpx.HTTPError):
                await cleartext.get("/healthz")


async def test_the_guarded_protocol_bounds_headers_over_tls(
    database: Database, tmp_path: Path
) -> None:
    pair = self_signed(tmp_path)
    limits = EdgeSettings(
        tls_cert_file=pair.cert,
        tls_key_file=pair.key,
        header_timeout_seconds=0.3,
        max_header_bytes=4096,
        linger_seconds=0.3,
    )
    async with serving(database, limits) as url:
        async with httpx.AsyncClient(base_url=url, verify=trusting(pair)) as tls:
            large = await tls.get("/healthz", headers={"X-Padding": "x" * 8192})
            assert large.status_code == 431
            assert large.headers["content-type"] == "application/problem+json"
        # Headers that never finish: answered 408 within the header timeout, over TLS.
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(
            parts.hostname, parts.port, ssl=trusting(pair), server_hostname="127.0.0.1"
        )
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: tickwork\r\n")
            await writer.drain()
            async with asyncio.timeout(3):
                answer = await reader.read(4096)
            assert answer.startswith(b"HTTP/1.1 408 "), answer
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()


async def served_certificate(url: str) -> bytes:
    """The certificate the server at ``url`` presents to a new connection."""
    parts = urlsplit(url)
    anything = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anything.check_hostname = False
    anything.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection(parts.hostname, parts.port, ssl=anything)
    try:
        presented: bytes = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return presented
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


async def test_a_renewed_certificate_is_served_without_a_restart(
    database: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pair = self_signed(tmp_path)
    limits = EdgeSettings(tls_cert_file=pair.cert, tls_key_file=pair.key, tls_reload_seconds=0.05)

    def der(path: Path) -> bytes:
        loaded = x509.load_pem_x509_certificate(path.read_bytes())
        return loaded.public_bytes(serialization.Encoding.DER)

    async with serving(database, limits) as url:
        first = der(pair.cert)
        assert await served_certificate(url) == first
        # A key that does not match: the pair served so far stays.
        (tmp_path / "renewed").mkdir()
        renewed = self_signed(tmp_path / "renewed")
        pair.key.write_bytes(renewed.key.read_bytes())
        await eventually(
            lambda: any(getattr(r, "action", None) == "tls-reload-failed" for r in caplog.records),
            what="the mismatched pair tried",
        )
        assert await served_certificate(url) == first
        # The whole renewed pair: new connections get it.
        pair.cert.write_bytes(renewed.cert.read_bytes())

        async def renewed_served() -> bool:
            return await served_certificate(url) == der(renewed.cert)

        await eventually(renewed_served, every=0.05, what="the renewed pair served")


def test_a_certificate_that_does_not_load_is_one_clear_error(tmp_path: Path) -> None:
    first, second = self_signed(tmp_path, "first"), self_signed(tmp_path, "second")
    check_tls(EdgeSettings(tls_cert_file=first.cert, tls_key_file=first.key))
    with pytest.raises(BadCertificate, match=r"cannot serve TLS with .*first\.crt"):
        check_tls(EdgeSettings(tls_cert_file=first.cert, tls_key_file=second.key))
    with pytest.raises(ValueError, match="--tls-cert and --tls-key go together"):
        EdgeSettings(tls_cert_file=first.cert)
