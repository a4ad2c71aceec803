"""Where a worker's bearer token comes from: a fixed string, or a file that something
else keeps fresh.

Inside Kubernetes the token is the pod's projected ServiceAccount token, which the
kubelet rewrites before it expires (an hour by default). A worker that read it once
would be refused with 401 once that hour is up, so ``TokenFile`` reads the file again
every ``reread_seconds`` and at once after a 401 (the kubelet may have rotated it since
the last read); the client then repeats the refused call once with the new token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

log = logging.getLogger("tickwork.worker")

# client-go re-reads a token file once a minute; the kubelet rotates it at 80 % of its
# lifetime, so a minute leaves any lifetime of ten minutes or more ample margin.
DEFAULT_REREAD_SECONDS = 60.0


class TokenFile:
    """A bearer token read from ``path``: re-read every ``reread_seconds`` and when the
    API refuses it. The file must exist and hold a token when this is made."""

    def __init__(
        self,
        path: str | Path,
        *,
        reread_seconds: float = DEFAULT_REREAD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.reread_seconds = reread_seconds
        self._clock = clock
        self._token = self._read()
        self._read_at = clock()

    def token(self) -> str:
        """The token to send now."""
        if self._clock() - self._read_at >= self.reread_seconds:
            self.refresh()
        return self._token

    def refresh(self) -> bool:
        """Read the file now; True when it holds a new token. A file that cannot be
        read keeps the token read last (it is logged): the next call may still pass."""
        self._read_at = self._clock()
        try:
            token = self._read()
        except ValueError as error:
            log.warning(
                "keeping the last token: %s",
                error,
                extra={"action": "token-reread-failed", "path": str(self.path)},
            )
            return False
        changed = token != self._token
        self._token = token
        return changed

    def _read(self) -> str:
        try:
            token = self.path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"cannot read the token file {self.path}: {error}") from error
        if not token:
            raise ValueError(f"the token file {self.path} is empty")
        return token


Token = str | TokenFile
"""What ``Worker``, ``WorkerClient`` and the clients of ``tickwork.client`` take as
``token``."""


def from_env(env: Mapping[str, str]) -> Token:
    """``TICKWORK_TOKEN``, or a ``TokenFile`` of ``TICKWORK_TOKEN_FILE`` (not both)."""
    token, path = env.get("TICKWORK_TOKEN"), env.get("TICKWORK_TOKEN_FILE")
    if token and path:
        raise ValueError("set one of TICKWORK_TOKEN and TICKWORK_TOKEN_FILE, not both")
    if path:
        return TokenFile(path)
    if not token:
        raise ValueError("no token: set TICKWORK_TOKEN or TICKWORK_TOKEN_FILE, or pass token=")
    return token


def current(token: Token) -> str:
    return token if isinstance(token, str) else token.token()
