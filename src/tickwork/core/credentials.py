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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from tickwork.core import fields

__all__ = ["Finding", "find", "may_hold_value", "secret_key"]


@dataclass(frozen=True, slots=True)
class _Detector:
    """A credential shape: found only where one of its ``fragments`` occurs (a
    substring test, at memory speed), then confirmed by ``pattern``, which starts with
    a literal so the regular expression engine skips ahead to it. ``folded``: both
    read the lower-cased text."""

    name: str
    fragments: tuple[str, ...]
    pattern: re.Pattern[str]
    folded: bool = False
    confirm: Callable[[re.Match[str]], bool] | None = None


def _mixed(match: re.Match[str]) -> bool:
    """A bearer token has letters and digits (``Bearer of bad news`` is prose)."""
    token = match.group(1)
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def _user_and_password(match: re.Match[str]) -> bool:
    """``user:password`` in base64, as an ``Authorization: Basic`` header carries it."""
    encoded = match.group(1)
    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii() and decoded.decode().isprintable()


_DETECTORS: Final = (
    _Detector(
        "private-key",
        ("-----BEGIN ",),
        re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    ),
    _Detector(
        "aws-access-key",
        ("AKIA", "ASIA"),
        re.compile(r"(?:AKIA|ASIA)(?<![A-Z0-9]....)[A-Z0-9]{16}(?![A-Z0-9])"),
    ),
    _Detector(
        "google-api-key",
        ("AIza",),
        re.compile(r"AIza(?<![A-Za-z0-9_-]....)[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
    ),
    _Detector(
        "github-token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(
            r"(?:gh[pousr]_(?<![A-Za-z0-9_]....)[A-Za-z0-9]{36,255}"
            r"|github_pat_(?<![A-Za-z0-9_]...........)[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])"
        ),
    ),
    _Detector(
        "slack-token",
        ("xox", "hooks.slack.com"),
        re.compile(
            r"xox[abposr]-(?<![A-Za-z0-9].....)[A-Za-z0-9-]{10,}"
            r"|hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+"
        ),
    ),
    _Detector(
        "azure-key",
        ("accountkey=", "sharedaccesskey=", "sig="),
        re.compile(r"(?:accountkey|sharedaccesskey)=[a-z0-9+/]{20,}|[?&]sig=[a-z0-9%+/=]{20,}"),
        folded=True,
    ),
    _Detector(
        "jwt",
        ("eyJ",),
        re.compile(r"eyJ(?<![A-Za-z0-9_-]...)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."),
    ),
    _Detector(
        "bearer-token",
        ("bearer",),
        re.compile(r"\bbearer[ \t]+([a-z0-9._~+/-]{20,})"),
        folded=True,
        confirm=_mixed,
    ),
    _Detector(
        "basic-credentials",
        ("basic",),
        re.compile(r"\b[Bb][Aa][Ss][Ii][Cc][ \t]+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
        folded=False,
        confirm=_user_and_password,
    ),
    _Detector(
        "url-password",
        ("://",),
        # user:password@ right after the scheme, each part bounded.
        re.compile(r"://[^/\s:@]{1,256}:[^/\s@]{1,256}@"),
    ),
)
# Every detector needs at least this many characters.
_SHORTEST: Final = 8
# What the JSON text of a payload must hold for a detector to have anything to find:
# most payloads hold none of it, and their scan is two substring searches.
_TEXT_FRAGMENTS: Final = tuple(
    sorted({f.encode() for d in _DETECTORS if not d.folded for f in d.fragments} - {b"basic"})
)
_FOLDED_TEXT_FRAGMENTS: Final = tuple(
    sorted({f.encode() for d in _DETECTORS if d.folded for f in d.fragments} | {b"basic"})
)
_KEY_FRAGMENTS: Final = (b"passw", b"secret", b"token", b"key", b"authorization")

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
    folded: str | None = None
    for detector in _DETECTORS:
        if detector.folded or detector.name == "basic-credentials":
            if folded is None:
                folded = text.lower()
            seen = folded
        else:
            seen = text
        if not any(fragment in seen for fragment in detector.fragments):
            continue
        for match in detector.pattern.finditer(seen if detector.folded else text):
            if detector.confirm is None or detector.confirm(match):
                return detector.name
    return None


# A place in the value, built only when a credential is found: (parent, key or index).
_Trail = tuple["_Trail", "str | int"] | None


def _path(trail: _Trail) -> str:
    steps: list[str | int] = []
    while trail is not None:
        trail, step = trail
        steps.append(step)
    path = ""
    for step in reversed(steps):
        path = fields.index(path, step) if isinstance(step, int) else fields.key(path, step)
    return path


_TEXT_FRAGMENT_STRINGS: Final = tuple(f.decode() for f in _TEXT_FRAGMENTS)
_FOLDED_TEXT_FRAGMENT_STRINGS: Final = tuple(f.decode() for f in _FOLDED_TEXT_FRAGMENTS)


def may_hold_value(encoded: bytes) -> bool:
    """Whether a JSON text (as orjson writes it: only quotes, backslashes and control
    characters escaped) holds what a value detector looks for; False means no string in
    it is a credential by shape (keys are not looked at: ``secret_key``). Exact: a
    string is lower-cased character by character, so what its lower-cased form holds,
    the lower-cased text holds too (bytes are lower-cased as such only when ASCII)."""
    if encoded.isascii():
        folded = encoded.lower()
        return any(f in encoded for f in _TEXT_FRAGMENTS) or any(
            f in folded for f in _FOLDED_TEXT_FRAGMENTS
        )
    text = encoded.decode()
    lowered = text.lower()
    return any(f in text for f in _TEXT_FRAGMENT_STRINGS) or any(
        f in lowered for f in _FOLDED_TEXT_FRAGMENT_STRINGS
    )


_KEY_NOISE_BYTES: Final = b"-_ \t\n\r\x0b\x0c"


def _may_hold_secret_key(encoded: bytes) -> bool:
    """Whether a JSON text could hold a key ``secret_key`` takes for a secret: its
    fragments looked for once the noise ``secret_key`` ignores is gone. A text with an
    escape or a non-ASCII character (where other whitespace may hide) counts as one."""
    if b"\\" in encoded or not encoded.isascii():
        return True
    normal = encoded.lower().translate(None, _KEY_NOISE_BYTES)
    return any(f in normal for f in _KEY_FRAGMENTS)


def find(value: Any, encoded: bytes | None = None) -> Finding | None:
    """An obvious credential in a JSON value (the first one found), or None.

    ``encoded``: the value's JSON text, when the caller has it: what it cannot hold,
    the walk does not look for.
    """
    values, keys = True, True
    if encoded is not None:
        values = may_hold_value(encoded)
        keys = _may_hold_secret_key(encoded)
        if not values and not keys:
            return None
    pending: list[tuple[_Trail, Any]] = [(None, value)]
    while pending:
        trail, item = pending.pop()
        if isinstance(item, str):
            detector = _value_detector(item) if values else None
            if detector is not None:
                return Finding(_path(trail), detector)
        elif isinstance(item, dict):
            children: list[tuple[_Trail, Any]] = []
            for key, child in item.items():
                if not isinstance(key, str):
                    continue
                if keys and isinstance(child, str) and child.strip() and secret_key(key):
                    return Finding(_path((trail, key)), "secret-key", key)
                children.append(((trail, key), child))
            pending.extend(reversed(children))
        elif isinstance(item, list):
            indexed = [((trail, index), child) for index, child in enumerate(item)]
            pending.extend(reversed(indexed))
    return None
