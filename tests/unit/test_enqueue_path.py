"""The batch's checks of its payloads agree with the checks of the ``Payload`` type
(the enqueue path's tests that need a database are in tests/test_enqueue_path.py)."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from tickwork.api import bodies
from tickwork.core import credentials, limits
from tickwork.core.spec import encoded_payloads, valid_payload

from .test_credentials import BENIGN, CAUGHT

KELVIN = "\u212a"  # lower-cases to an ASCII k
SHAPES: list[Any] = [
    {"a": {"b": [1, 2.5, None, True, "x"]}},
    {"nested": [[[[{"x": 1}]]]]},
    [{"k": "v"}, ["a", "b"]],
    "plain text",
    12,
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    float("inf"),
    float("nan"),
    "nul \x00 inside",
    {"key \x00": 1},
    {"x": ["nul \x00 inside"]},
    "lone \ud800 surrogate",
    {"lone \udfff": 1},
    "é, ü and ☃ are fine",
    {"pass_word": "hunter2!"},
    {"Pass-Word": "hunter2!"},
    {"db": {"Client_Secret": "abc"}},
    {"token": "   "},
    {"items": [{"apiKey": "abc"}]},
    {"conn": f"Account{KELVIN}ey=" + "a" * 30},
    {"note": f"{KELVIN}ey is not a secret"},
    {"big": "x" * limits.MAX_PAYLOAD_BYTES},
    ["x" * (limits.MAX_PAYLOAD_BYTES - 8)],
]


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "payload",
    [
        *BENIGN,
        *(case[0] for case in CAUGHT),
        *SHAPES,
        _nested(limits.MAX_JSON_DEPTH),
        _nested(limits.MAX_JSON_DEPTH + 1),
        {"a": _nested(limits.MAX_JSON_DEPTH - 1)},
        {"a": _nested(limits.MAX_JSON_DEPTH)},
    ],
)
def test_the_batch_check_agrees_with_the_payload_type(payload: Any) -> None:
    valid = valid_payload(payload)
    for batch in ([payload], [{"n": 1}, payload, "x"]):
        encoded = encoded_payloads(batch)
        assert (encoded is not None) == valid, batch
        if encoded is not None:
            assert encoded == [orjson.dumps(p) for p in batch]


def test_the_value_prefilter_misses_no_credential() -> None:
    for payload, _path, _detector in CAUGHT:
        assert credentials.may_hold_value(orjson.dumps(payload)) or not [
            detector
            for detector in [credentials.find(payload)]
            if detector is not None and detector.detector != "secret-key"
        ]
    hidden = {"conn": f"Account{KELVIN}ey=" + "a" * 30}
    assert credentials.find(hidden) is not None
    assert credentials.may_hold_value(orjson.dumps(hidden))
    assert not credentials.may_hold_value(orjson.dumps({"n": 1, "note": "plain"}))


def test_long_digit_runs_are_found_as_the_pattern_finds_them() -> None:
    pattern = re.compile(rb"[0-9]{19}")
    for raw in [
        b'{"n": 1234567890123456789}',
        b'{"n": 123456789012345678}',
        b'{"n": -12345678901234567890}',
        b'{"s": "0000000000000000000"}',
        b'{"a": 123456789, "b": 1234567890}',
        b"9" * 19,
        b"9" * 18 + b"x9",
        b"",
    ]:
        assert bodies._long_digits(raw) == bool(pattern.search(raw)), raw


@pytest.mark.parametrize(
    "payload",
    [
        {"pass_word": "hunter2!"},
        {"Pass-Word": "hunter2!"},
        {"API KEY": "abc"},
        {"pass\x1cword": "hunter2!"},
        {"conn": f"Account{KELVIN}ey=" + "a" * 30},
    ],
)
def test_the_scan_given_the_text_finds_what_the_walk_finds(payload: Any) -> None:
    """Keys that name a secret through the noise ``secret_key`` ignores, and a value
    whose lower-cased form holds a detector's fragment only through a non-ASCII
    letter, are found with the JSON text given too."""
    found = credentials.find(payload)
    assert found is not None
    assert credentials.find(payload, orjson.dumps(payload)) == found
