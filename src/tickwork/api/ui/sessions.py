"""Dashboard sessions: the signed-in token, sealed in a cookie that expires.

Signing in trades a bearer token for a session cookie (HttpOnly, SameSite=Strict,
Secure behind TLS, scoped to ``/ui``). The cookie holds the token encrypted and
authenticated with Fernet (AES-128-CBC + HMAC-SHA256), with the time it was issued:
every request decrypts it, refuses it past its lifetime, and authenticates the token
again through the API's own authenticator, so the dashboard has exactly the API's
authentication and tenancy, a token removed from the tokens file stops working at
once, and any API replica that shares the secret serves any session. The token never
appears in a URL, a page or a log.

CSRF: every state-changing form carries a token derived from the session's random id
(HMAC), checked on every POST, on top of SameSite=Strict and an Origin check.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson
from cryptography.fernet import Fernet, InvalidToken

SESSION_COOKIE: Final = "tickwork_session"
LOGIN_COOKIE: Final = "tickwork_login"
FLASH_COOKIE: Final = "tickwork_flash"
COOKIE_PATH: Final = "/ui"
FLASH_SECONDS: Final = 120
LOGIN_SECONDS: Final = 3600


@dataclass(frozen=True, slots=True)
class Session:
    token: str
    session_id: str
    issued_at: int


def _key(secret: bytes, purpose: bytes) -> bytes:
    return hmac.new(secret, b"tickwork.ui." + purpose, hashlib.sha256).digest()


class Sealer:
    """Seals session, sign-in and flash values; checks CSRF tokens.

    ``secret`` is shared by every API replica (``TICKWORK_UI_SECRET``); without one a
    random secret is drawn, and sessions live as long as the process. ``clock`` (Unix
    seconds) is injectable so tests can outlive a session without waiting.
    """

    def __init__(
        self,
        secret: str | None,
        session_seconds: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        raw = secret.encode("utf-8") if secret else secrets.token_bytes(32)
        self._fernet = Fernet(base64.urlsafe_b64encode(_key(raw, b"cookie")))
        self._csrf_key = _key(raw, b"csrf")
        self.session_seconds = session_seconds
        self._clock = clock
        # Session ids signed out in this process; other replicas honour the expiry only.
        self._ended: dict[str, float] = {}

    def now(self) -> int:
        return int(self._clock())

    def _seal(self, document: dict[str, Any]) -> str:
        return self._fernet.encrypt_at_time(orjson.dumps(document), self.now()).decode("ascii")

    def _open(self, value: str | None, ttl: int) -> dict[str, Any] | None:
        if not value or len(value) > 4096:
            return None
        try:
            raw = self._fernet.decrypt_at_time(value.encode("ascii"), ttl, self.now())
            document = orjson.loads(raw)
        except (InvalidToken, UnicodeEncodeError, orjson.JSONDecodeError):
            return None
        return document if isinstance(document, dict) else None

    # Sessions

    def new_session(self, token: str) -> tuple[Session, str]:
        session = Session(token, secrets.token_urlsafe(18), self.now())
        value = self._seal({"t": token, "s": session.session_id})
        return session, value

    def session(self, value: str | None) -> Session | None:
        document = self._open(value, self.session_seconds)
        if document is None:
            return None
        token, session_id = document.get("t"), document.get("s")
        if not isinstance(token, str) or not isinstance(session_id, str):
            return None
        ended = self._ended.get(session_id)
        if ended is not None and ended > self.now():
            return None
        assert value is not None
        issued = self._fernet.extract_timestamp(value.encode("ascii"))
        return Session(token, session_id, issued)

    def end(self, session: Session) -> None:
        now = self.now()
        self._ended = {sid: until for sid, until in self._ended.items() if until > now}
        self._ended[session.session_id] = session.issued_at + self.session_seconds + 1

    # CSRF

    def csrf_token(self, session_id: str) -> str:
        return hmac.new(self._csrf_key, session_id.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session_id: str, offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(
            self.csrf_token(session_id), str(offered).encode("ascii", "replace").decode()
        )

    # The sign-in form: a nonce cookie and its CSRF token (no session exists yet).

    def login_nonce(self) -> tuple[str, str]:
        nonce = secrets.token_urlsafe(18)
        return nonce, self._seal({"n": nonce})

    def login_nonce_of(self, value: str | None) -> str | None:
        document = self._open(value, LOGIN_SECONDS)
        nonce = None if document is None else document.get("n")
        return nonce if isinstance(nonce, str) else None

    # Flash messages: one line shown after a redirect.

    def flash(self, kind: str, text: str) -> str:
        return self._seal({"k": kind, "m": text[:2000]})

    def flash_of(self, value: str | None) -> tuple[str, str] | None:
        document = self._open(value, FLASH_SECONDS)
        if document is None:
            return None
        kind, text = document.get("k"), document.get("m")
        if kind not in ("ok", "error") or not isinstance(text, str):
            return None
        return kind, text
