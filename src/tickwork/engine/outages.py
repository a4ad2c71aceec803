"""Store outages, as the adapters ask about them: whether an error means the store is
unreachable for now (answer 503, back off, retry) or is a bug (answer 500, log loudly).

The store decides (``store.outages``); the API and the CLI ask here, so they need no
knowledge of the database driver.
"""

from __future__ import annotations

from typing import Final

from tickwork.store import outages

CANDIDATES: Final[tuple[type[Exception], ...]] = outages.CANDIDATES
"""Exception classes some of whose instances are outages (``is_outage`` decides)."""


def is_outage(error: BaseException) -> bool:
    """Whether ``error`` says the store is (for now) unreachable or unavailable."""
    return outages.is_outage(error)


def describe(error: BaseException) -> str:
    """A one-line description for logs and problems: the class and the message."""
    return outages.describe(error)
