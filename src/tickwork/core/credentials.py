"""Obvious credentials in payloads, found before they are stored.

Payloads are stored in the shard databases, shown by the API and the CLI, and copied
into every lease, attempt and DLQ entry, so a secret in a payload leaks to everyone who
can read the job. Payloads name secrets instead (``{"secretRef": "billing-db"}``) and
workers resolve the name where they run. This scanner refuses the obvious mistakes:
it looks for the shapes of well-known credentials in every string, and for non-empty
strings under keys that hold secrets. It cannot see a secret without a shape (a plain
random string under an innocent key); it is a seatbelt, not a vault.

The detectors, by name (``docs/workers.md`` lists them for users):

* ``private-key``: a PEM private key block (``-----BEGIN … PRIVATE KEY-----``), which
  also catches a Google Cloud service-account key file's ``private_key``;
* ``aws-access-key``: an AWS access key id (``AKIA…``, ``ASIA…``);
* ``google-api-key``: a Google API key (``AIza…``);
* ``github-token``: a GitHub token (``ghp_…``, ``gho_…``, ``ghu_…``, ``ghs_…``,
  ``ghr_…``, ``github_pat_…``);
* ``slack-token``: a Slack token (``xoxb-…``, ``xoxp-…``, …) or incoming-webhook URL;
* ``azure-key``: an Azure connection string's ``AccountKey=`` or ``SharedAccessKey=``,
  or a shared access signature's ``sig=``;
* ``bearer-token`` and ``basic-credentials``: an ``Authorization`` header value;
* ``jwt``: a JSON Web Token (``eyJ….eyJ….…``);
* ``url-password``: a URL with a password in it (``postgres://user:pw@host/db``);
* ``secret-key``: a non-empty string under a key such as ``password``, ``passwd``,
  ``secret``, ``token``, ``apiKey``/``api_key``, ``accessKey``, ``privateKey``,
  ``clientSecret`` or ``authorization`` (case, ``_`` and ``-`` ignored; compounds
  like ``dbPassword`` and ``refreshToken`` too, but not ``pageToken``-style cursors).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any, Final

from tickwork.core import fields

__all__ = ["Finding", "find"]

_VALUE_PATTERNS: Final = {
    "private-key": r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
    "aws-access-key": r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])",
    "google-api-key": r"(?<![A-Za-z0-9_-])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])",
    "github-token": r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,255}"
    r"|github_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])",
    "slack-token": r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+",
    "azure-key": r"(?i:AccountKey|SharedAccessKey)=[A-Za-z0-9+/]{20,}={0,2}"
    r"|[?&]sig=[A-Za-z0-9%+/=]{20,}",
    "jwt": r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
    "bearer-token": r"(?i:\bbearer)[ \t]+(?P<bearer>[A-Za-z0-9._~+/-]{20,}=*)",
    "basic-credentials": r"(?i:\bbasic)[ \t]+(?P<basic>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])",
    "url-password": r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:[^/\s@]+@",
}
_VALUE_RE: Final = re.compile(
    "|".join(
        f"(?P<{name.replace('-', '_')}>{pattern})" for name, pattern in _VALUE_PATTERNS.items()
    )
)
# Every detector above needs at least this many characters.
_SHORTEST: Final = 8

# Keys whose string values are secrets, lower-cased without '_' and '-'.
_SECRET_KEYS: Final = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "accesskey",
        "privatekey",
        "clientsecret",
        "authorization",
        "accesstoken",
        "refreshtoken",
        "authtoken",
        "bearertoken",
        "idtoken",
        "sessiontoken",
        "securitytoken",
        "apitoken",
        "secretkey",
        "secretaccesskey",
    }
)
# Compounds that end like these are secrets too (``dbPassword``, ``webhookSecret``);
# ``token`` is not among them, so ``pageToken``-style cursors pass.
_SECRET_SUFFIXES: Final = (
    "password",
    "passwd",
    "secret",
    "apikey",
    "accesskey",
    "privatekey",
    "secretkey",
)
_KEY_NOISE: Final = re.compile(r"[-_\s]")


@dataclass(frozen=True, slots=True)
class Finding:
    """Where a credential was found (``db.password``, ``[2].url``: relative to the
    value scanned, ``""`` for the value itself) and which detector found it."""

    path: str
    detector: str
    key: str | None = None  # the key that names a secret, for ``secret-key``

    def describe(self) -> str:
        if self.key is not None:
            shown = self.key if len(self.key) <= 64 else self.key[:64] + "…"
            return f"a secret (a non-empty string under the key {shown!r})"
        return _DESCRIPTIONS[self.detector]


_DESCRIPTIONS: Final = {
    "private-key": "a private key block",
    "aws-access-key": "an AWS access key id",
    "google-api-key": "a Google API key",
    "github-token": "a GitHub token",
    "slack-token": "a Slack token",
    "azure-key": "an Azure account key or shared access signature",
    "jwt": "a JSON Web Token",
    "bearer-token": "a bearer token",
    "basic-credentials": "HTTP basic credentials",
    "url-password": "a URL with a password",
    "secret-key": "a secret under a key that names one",
}


def secret_key(key: str) -> bool:
    """Whether a non-empty string under ``key`` is taken for a secret."""
    normal = _KEY_NOISE.sub("", key).lower()
    return normal in _SECRET_KEYS or normal.endswith(_SECRET_SUFFIXES)


def _value_detector(text: str) -> str | None:
    if len(text) < _SHORTEST:
        return None
    for match in _VALUE_RE.finditer(text):
        name = match.lastgroup
        if name is None:  # pragma: no cover - every alternative is a named group
            continue
        if name == "basic" or name == "basic_credentials":
            if not _is_basic(match.group("basic")):
                continue
            return "basic-credentials"
        if name == "bearer" or name == "bearer_token":
            token = match.group("bearer")
            if not (any(c.isdigit() for c in token) and any(c.isalpha() for c in token)):
                continue
            return "bearer-token"
        return name.replace("_", "-")
    return None


def _is_basic(encoded: str) -> bool:
    """``user:password`` in base64, as an ``Authorization: Basic`` header carries it."""
    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii() and decoded.decode().isprintable()


def find(value: Any) -> Finding | None:
    """An obvious credential in a JSON value (the first one found), or None."""
    pending: list[tuple[str, Any]] = [("", value)]
    while pending:
        path, item = pending.pop()
        if isinstance(item, str):
            detector = _value_detector(item)
            if detector is not None:
                return Finding(path, detector)
        elif isinstance(item, dict):
            children: list[tuple[str, Any]] = []
            for key, child in item.items():
                if not isinstance(key, str):
                    continue
                where = fields.key(path, key)
                if isinstance(child, str) and child.strip() and secret_key(key):
                    return Finding(where, "secret-key", key)
                children.append((where, child))
            pending.extend(reversed(children))
        elif isinstance(item, list):
            indexed = [(fields.index(path, index), child) for index, child in enumerate(item)]
            pending.extend(reversed(indexed))
    return None
