"""A tokens file served as it is now: the dispatcher reads it again when it changes.

Rotating a token is then an edit (add the new entry, move the clients, remove the old
one), not a restart. The file is looked at every ``check_seconds`` (a ``stat``; it is
read only when that changed, which also catches a Kubernetes Secret volume's atomic
symlink swap). A file that no longer loads (a typo, half written) changes nothing: the
tokens read last keep serving and the error is logged, so an edit can never lock
everybody out. A removed token is refused from the next call on; the long-polls it
holds are ended (``generation`` tells them to look again, ``on_change`` wakes them).

The tenants' quotas in the file are read at start: a change to them is logged as
needing a restart (they are folded into the API's settings once).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tickwork.api.auth import Principal, StaticTokens

log: Final = logging.getLogger("tickwork.api")

DEFAULT_CHECK_SECONDS: Final = 1.0

Fingerprint = tuple[int, int, int, int]  # device, inode, mtime in ns, size


def _fingerprint(path: Path) -> Fingerprint | None:
    try:
        found = os.stat(path)  # through symlinks: a Secret volume swaps ..data
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_mtime_ns, found.st_size)


class TokensFile:
    """The tokens of ``path``, read again when the file changes. Loading it at start
    raises ``ValueError`` as ``StaticTokens.from_file`` does: a bad file stops the
    start; later, it only logs."""

    def __init__(self, path: Path, *, check_seconds: float = DEFAULT_CHECK_SECONDS) -> None:
        self.path = path
        self.check_seconds = check_seconds
        self._seen = _fingerprint(path)
        self._tokens = StaticTokens.from_file(path)
        self.quota_overrides = self._tokens.quota_overrides
        self.generation = 0
        """Grows at each reload that replaced the tokens: a call that authenticated
        under an older one checks its token again before it goes on waiting."""
        self._listeners: list[Callable[[bool], None]] = []

    async def authenticate(self, token: str) -> Principal | None:
        return await self._tokens.authenticate(token)

    def on_reload(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(loaded)`` after each changed file: True when its tokens now
        serve, False when it did not load (the old ones still do)."""
        self._listeners.append(listener)

    def reload(self) -> bool:
        """Read the file again if it changed since the last look; True when its tokens
        replaced the ones served."""
        seen = _fingerprint(self.path)
        if seen == self._seen:
            return False
        self._seen = seen
        try:
            tokens = StaticTokens.from_file(self.path)
        except ValueError as error:
            log.error(
                "tokens file not reloaded, the tokens read before still serve: %s",
                error,
                extra={"action": "tokens-reload-failed", "path": str(self.path)},
            )
            self._tell(False)
            return False
        if tokens.quota_overrides != self.quota_overrides:
            log.warning(
                "the quotas in the tokens file changed: they are read at start, restart "
                "the dispatcher to apply them",
                extra={"action": "tokens-quotas-changed", "path": str(self.path)},
            )
        self._tokens = tokens
        self.generation += 1
        log.info(
            "tokens file reloaded: %d token(s) serve",
            tokens.count,
            extra={"action": "tokens-reloaded", "path": str(self.path)},
        )
        self._tell(True)
        return True

    def _tell(self, loaded: bool) -> None:
        for listener in self._listeners:
            listener(loaded)

    async def watch(self) -> None:
        """Look at the file every ``check_seconds`` until cancelled."""
        while True:
            await asyncio.sleep(self.check_seconds)
            self.reload()
