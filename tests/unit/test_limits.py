"""One list of the protocol's limits, shared and documented.

``tickwork.core.limits`` is what the API, the worker SDK and the store read; the limits
table of ``docs/http-api.md`` is what clients read. They must say the same.
"""

from __future__ import annotations

import re
from pathlib import Path

from tickwork.core import limits
from tickwork.store import leases
from tickwork.worker import client, runner

DOCS = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"
_ROW = re.compile(r"^\| `([A-Z_]+)` \| ([0-9.]+)\b")


def constants() -> dict[str, int | float]:
    return {
        name: value
        for name, value in vars(limits).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, int | float)
    }


def documented() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in DOCS.read_text("utf-8").splitlines():
        match = _ROW.match(line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def _text(value: int | float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def test_every_limit_is_in_the_docs_table_with_its_value() -> None:
    table = documented()
    expected = {name: _text(value) for name, value in constants().items()}
    assert {name: table.get(name) for name in expected} == expected
    assert set(table) == set(expected), "the table lists a limit the module does not have"


def test_the_edge_limits_have_their_agreed_values() -> None:
    assert limits.MAX_HEADER_BYTES == 16 * 1024
    assert limits.HEADER_READ_TIMEOUT_SECONDS == 10
    assert limits.BODY_READ_TIMEOUT_SECONDS == 30
    assert limits.MAX_CONNECTIONS == 2048
    assert limits.MAX_BODY_DEPTH > limits.MAX_JSON_DEPTH


def test_the_sdk_and_the_store_keep_no_copies_of_their_own() -> None:
    # The constants that used to be duplicated are gone: one place decides.
    for module in (leases, client, runner):
        assert not hasattr(module, "MAX_BATCH"), module.__name__
    assert not hasattr(leases, "MAX_EXTENSION_SECONDS")
