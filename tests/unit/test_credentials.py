"""The payload credential scanner: what it catches, where it says it is, and the
ordinary payloads it lets through."""

from __future__ import annotations

import base64
import time
from typing import Any

import orjson
import pytest

from tickwork.core import credentials, limits

PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
GCP_KEY_FILE = {
    "type": "service_account",
    "project_id": "billing-prod",
    "private_key_id": "0123456789abcdef",
    "private_key": PEM,
    "client_email": "exporter@billing-prod.iam.gserviceaccount.com",
}
BASIC = base64.b64encode(b"admin:correct horse battery staple").decode()

CAUGHT: list[tuple[Any, str, str]] = [
    ({"key": PEM}, "key", "private-key"),
    ({"k": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl"}, "k", "private-key"),
    ({"k": "-----BEGIN PGP PRIVATE KEY BLOCK-----"}, "k", "private-key"),
    (GCP_KEY_FILE, "private_key", "secret-key"),
    ({"gcp": {"credentials": GCP_KEY_FILE}}, "gcp.credentials.private_key", "secret-key"),
    ({"id": "AKIAIOSFODNN7EXAMPLE"}, "id", "aws-access-key"),
    ({"env": ["X=1", "AWS=ASIAY34FZKBOKMUTVV7A"]}, "env[1]", "aws-access-key"),
    ({"maps": "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"}, "maps", "google-api-key"),
    ({"gh": "ghp_" + "a1B2" * 9}, "gh", "github-token"),
    (
        {"gh": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFG"},
        "gh",
        "github-token",
    ),
    ({"notify": "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp"}, "notify", "slack-token"),
    (
        {"hook": "https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX"},
        "hook",
        "slack-token",
    ),
    (
        {"conn": "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=" + "A" * 86 + "=="},
        "conn",
        "azure-key",
    ),
    ({"url": "https://x.blob.core.windows.net/c?sv=2020&sig=" + "a%2Bb" * 10}, "url", "azure-key"),
    ({"headers": {"X-Auth": "Bearer 4f9c2a7d1e8b3c6a5d0e9f8a"}}, "headers.X-Auth", "bearer-token"),
    ({"curl": f"-H 'Authorization: Basic {BASIC}'"}, "curl", "basic-credentials"),
    (
        {"jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"},
        "jwt",
        "jwt",
    ),
    ({"dsn": "postgresql://billing:pa55w0rd@db:5432/billing"}, "dsn", "url-password"),
    ({"password": "hunter2"}, "password", "secret-key"),
    ({"db": {"PASSWORD": "x"}}, "db.PASSWORD", "secret-key"),
    ({"passwd": "x"}, "passwd", "secret-key"),
    ({"client_secret": "x"}, "client_secret", "secret-key"),
    ({"clientSecret": "x"}, "clientSecret", "secret-key"),
    ({"api-key": "x"}, "api-key", "secret-key"),
    ({"apiKey": "x"}, "apiKey", "secret-key"),
    ({"ACCESS_KEY": "x"}, "ACCESS_KEY", "secret-key"),
    ({"privateKey": "x"}, "privateKey", "secret-key"),
    ({"token": "x"}, "token", "secret-key"),
    ({"refreshToken": "x"}, "refreshToken", "secret-key"),
    ({"dbPassword": "x"}, "dbPassword", "secret-key"),
    ({"aws_secret_access_key": "x"}, "aws_secret_access_key", "secret-key"),
    ({"webhook_secret": "x"}, "webhook_secret", "secret-key"),
    ({"Authorization": "anything at all"}, "Authorization", "secret-key"),
    (
        [{"ok": 1}, {"users": [{"name": "a", "password": "b"}]}],
        "[1].users[0].password",
        "secret-key",
    ),
    ({"odd key.with dots": {"secret": "s"}}, '["odd key.with dots"].secret', "secret-key"),
    (PEM, "", "private-key"),
]


@pytest.mark.parametrize(("payload", "path", "detector"), CAUGHT)
def test_obvious_credentials_are_found_with_their_path(
    payload: Any, path: str, detector: str
) -> None:
    found = credentials.find(payload)
    assert found is not None
    assert (found.path, found.detector) == (path, detector)
    assert found.describe()
    # Given the JSON text too (as the spec does), the scan skips nothing it needs.
    assert credentials.find(payload, orjson.dumps(payload)) == found


BENIGN: list[Any] = [
    None,
    {"format": "csv", "rows": 1000, "dryRun": False},
    {"password": {"secretRef": "billing-db"}, "token": {"secretRef": "api"}},
    {"secretRef": "billing-db"},
    {"password": "", "token": "   "},  # empty: nothing to leak
    {"passwordPolicy": "strict", "tokenCount": 12, "maxTokens": 4096, "secretName": "db"},
    {"pageToken": "CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA3", "nextPageToken": "abc123"},
    {"isSecret": True, "password": None, "token": 5},
    {"url": "https://example.com/reports?id=7&sort=asc", "mail": "mailto:ops@example.com"},
    {"db": "postgres://billing@db:5432/billing", "ftp": "ftp://files.example.com/x:y"},
    {"note": "bearer of bad news", "basic": "basic plan", "auth": "Bearer"},
    {"note": "the Basic tier costs 10/month"},
    {"sha": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
    {"uuid": "123e4567-e89b-12d3-a456-426614174000", "id": "AKIA-not-a-key"},
    {"text": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"},
    {"text": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"},
    {"b64": base64.b64encode(b"hello world, no colon here").decode()},
    {"eyJ": "eyJ not a token", "dots": "a.b.c"},
    ["token", "password", "secret"],  # words as values are not secrets
    {"keys": {"password": 1}},
]


@pytest.mark.parametrize("payload", BENIGN)
def test_ordinary_payloads_pass(payload: Any) -> None:
    assert credentials.find(payload) is None
    assert credentials.find(payload, orjson.dumps(payload)) is None


def test_scanning_the_largest_payload_is_quick() -> None:
    """As the spec scans: with the payload's JSON text, a few milliseconds of CPU (1 s
    is the bound here: a scan that went back over the text per key would take far
    longer). CPU time, so that a machine busy with other work cannot fail it."""
    for payload in [
        {f"k{i}": f"value number {i} with some words" for i in range(5500)},
        ["x" * (limits.MAX_PAYLOAD_BYTES - 8)],
        ["Bearer of " * (limits.MAX_PAYLOAD_BYTES // 11)],
        [{"password": {"secretRef": "db"}}] * 8000,
    ]:
        encoded = orjson.dumps(payload)
        assert len(encoded) <= limits.MAX_PAYLOAD_BYTES
        started = time.thread_time()
        assert credentials.find(payload, encoded) is None
        assert time.thread_time() - started < 1.0
