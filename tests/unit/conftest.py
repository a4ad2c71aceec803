"""The unit tier: tests of pure logic (cron, DST rules, specs, hashing, backoff, limits,
settings, the importer) that need no PostgreSQL, no server and no other process, and
each take a moment. ``make unit-fast`` runs only these; ``make unit`` runs them with
the rest.

What makes a test belong here is held for every test under this folder:

- no database: a test that asks for the PostgreSQL of tests/conftest.py is refused when
  the tier is collected, so a run of the tier alone never starts one;
- no network: no socket but a Unix one can be made (asyncio's loops wake themselves
  through a Unix socket pair), none can connect anywhere, and no name is resolved
  (pytest-socket);
- no waiting: a test fails after ``UNIT_TIMEOUT`` seconds instead of the suite's 120.
  Time goes through an injected clock (``FrozenClock``, or a callable), never a sleep.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_socket

TIER = Path(__file__).parent
UNIT_TIMEOUT = 2.0
# The fixture every database fixture of tests/conftest.py stands on: it starts the
# session's PostgreSQL.
DATABASE = "server_url"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Called with the items of the whole run: only those under this folder are the tier's.
    for item in items:
        if not item.path.is_relative_to(TIER):
            continue
        if DATABASE in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(
                f"{item.nodeid} needs PostgreSQL ({DATABASE}): it belongs outside tests/unit"
            )
        item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT))


@pytest.fixture(autouse=True)
def no_network() -> None:
    # pytest-socket lifts both restrictions after each test (its teardown hook).
    pytest_socket.disable_socket(allow_unix_socket=True)
    pytest_socket.socket_allow_hosts([], allow_unix_socket=False)
