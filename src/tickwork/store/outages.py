"""What counts as a store outage: an error that the same call, repeated after a pause,
can get past. PostgreSQL restarting (``57P03`` "the database system is starting up",
admin or crash shutdown), a connection that was reset, closed or never made, a link
that stopped answering (a timeout), a server out of connection slots, and no server of
a multi-host URL taking writes (``target_session_attrs=read-write`` while a standby is
being promoted).

Every background loop backs off and retries on these instead of exiting, and the API
answers them ``503 store-unavailable`` with ``Retry-After`` instead of ``500``. Anything
else is a bug or bad data and is reported as such.
"""

from __future__ import annotations

from typing import Final

import asyncpg
from asyncpg import exceptions

# Classes whose instances may be outages; ``is_outage`` has the last word (an
# ``InterfaceError`` subclass such as ``DataError`` is a programming error, not one).
CANDIDATES: Final[tuple[type[Exception], ...]] = (
    OSError,  # refused, reset, unreachable, and TimeoutError (a subclass since 3.3)
    asyncpg.PostgresConnectionError,  # class 08: connection exceptions
    exceptions.OperatorInterventionError,  # class 57: shutdown, starting up, cancelled
    exceptions.TooManyConnectionsError,
    asyncpg.InterfaceError,
    # Every server answered, none as the session attributes ask: a failover under way.
    exceptions.TargetServerAttributeNotMatched,
)


def is_outage(error: BaseException) -> bool:
    """Whether ``error`` says the store is (for now) unreachable or unavailable."""
    if isinstance(error, asyncpg.InterfaceError):
        # The bare class is what asyncpg raises for a closed connection or pool;
        # its subclasses (DataError, ...) are about the arguments given.
        return type(error) is asyncpg.InterfaceError
    return isinstance(error, CANDIDATES)


def starting_up(error: BaseException) -> bool:
    """Whether ``error`` is PostgreSQL refusing connections while it starts (57P03)."""
    return isinstance(error, exceptions.CannotConnectNowError)


def describe(error: BaseException) -> str:
    """A one-line description for logs and problems: the class and the message."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    name = type(error).__name__
    return f"{name}: {text}" if text else name
