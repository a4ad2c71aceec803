"""Request bodies are read in time linear in their size, whatever they hold.

A body of one quote and 30 000 escaped quotes, never closed (60 KB), once took 15 s of
CPU to refuse: the scan that names a too-deep field started over at every quote of the
unclosed string and read on to the end. The server answered nothing meanwhile, not even
``/healthz``.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
from conftest import ApiServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.clients import client
from tickwork.api import bodies
from tickwork.core import limits
from tickwork.core.errors import InvalidRequest

PROBLEM = "application/problem+json"
JSON = {"content-type": "application/json"}

# One quote, then 30 000 escaped quotes: a string that never ends (60 KB).
UNCLOSED = b'"' + b'\\"' * 30_000
# Past the bracket count under which no text can nest too deep, so the scan runs.
OPEN_ARRAY = b"[" + b"[]," * limits.MAX_BODY_DEPTH
HOSTILE = [UNCLOSED, OPEN_ARRAY + UNCLOSED, UNCLOSED + b"[" * 100]


@contextmanager
def no_collection() -> Iterator[None]:
    """Keep the garbage collector's pauses out of what a test times."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def parse_cpu_seconds(raw: bytes, lenient: bool) -> float:
    """CPU time of this thread to parse ``raw`` (refused or not)."""
    started = time.thread_time()
    with suppress(InvalidRequest):
        bodies.parse(raw, lenient=lenient)
    return time.thread_time() - started


@pytest.mark.parametrize("lenient", [False, True], ids=["worker", "team"])
@pytest.mark.parametrize("raw", HOSTILE, ids=["unclosed", "in-an-array", "then-brackets"])
def test_a_body_with_an_unclosed_string_is_refused_at_once(raw: bytes, lenient: bool) -> None:
    started = time.thread_time()
    with pytest.raises(InvalidRequest) as refused:
        bodies.parse(raw, lenient=lenient)
    assert time.thread_time() - started < 0.25  # 15 s of CPU for the 60 KB body
    assert refused.value.field == "body"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"payload": ' + b"[" * 5000, "payload"),
        (
            b'{"a\\"]": "[{", "s": "\\\\", "runs": [{}, {"payload": ' + b"{" * 5000,
            "runs[1].payload",
        ),
        (b'{"items": [{"runId": "r\\u00e9:[", "error": ' + b"[" * 5000, "items[0].error"),
        (b'{"sch\\u0065dule": {"x": ' + b"[" * 5000, "schedule"),
        (b'[{"payload": ' + b"[" * 5000, "body"),
    ],
)
def test_a_body_too_deep_to_parse_still_names_its_field(raw: bytes, field: str) -> None:
    # Guards the rewritten scan: keys decoded with their escapes, brackets in strings
    # not counted, indexes counted at their level.
    for lenient in (False, True):
        with pytest.raises(InvalidRequest) as refused:
            bodies.parse(raw, lenient=lenient)
        assert refused.value.field == field
        assert "nests deeper than allowed" in refused.value.detail


# --- CPU per byte: a body eight times as long costs about eight times as much ---

BASE_BYTES = 16 * 1024
REPEATS = 8
# Linear is 8; quadratic 64. Wide, for caches and a loaded machine.
MOST = 24
SLACK_SECONDS = 0.005

PIECES = [
    *(b'"', b"\\", b'\\"', b"\\\\", b"\\u", b"[", b"]", b"{", b"}", b":", b",", b" ", b"\n"),
    *(b"0", b"-1e999", b"NaN", b"9" * 30, b'"k":', b'""', b"[]", b"{}", b'"\\u00e9"', b"\xff"),
]
RUNS = [b'\\"', b"\\\\", b'"', b"[", b"{", b'{"a":', b"0,", b"[],", b'"",', b'"x', b"]", b"}"]
fragments = st.one_of(
    st.sampled_from(PIECES),
    st.builds(lambda run, times: run * times, st.sampled_from(RUNS), st.integers(1, 300)),
)
hostile_bodies = st.lists(fragments, min_size=1, max_size=25).map(b"".join)


def least_cpu_seconds(raw: bytes) -> float:
    """The least CPU of three parses of ``raw``, as a worker route and a team route read
    it."""
    best = math.inf
    for _ in range(3):
        best = min(best, parse_cpu_seconds(raw, False) + parse_cpu_seconds(raw, True))
    return best


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(hostile_bodies)
def test_parsing_costs_cpu_in_proportion_to_the_body(unit: bytes) -> None:
    # Opened and never closed: the parsers read on into the rest, and the count of
    # brackets is past the one under which the scan is not needed, in both bodies.
    base = OPEN_ARRAY + unit * math.ceil(BASE_BYTES / len(unit))
    with no_collection():
        short = least_cpu_seconds(base)
        long = least_cpu_seconds(base * REPEATS)
    assert long <= MOST * short + SLACK_SECONDS, (len(base), short, long)


# --- the served app ---


async def test_the_server_refuses_the_body_at_once_and_answers_health_meanwhile(
    api_server: ApiServer,
) -> None:
    calls = [
        (api_server.worker_token, "/v1/runs:heartbeat"),
        (api_server.team_token, "/v1/jobs/linear/runs"),
    ]
    finished = asyncio.Event()
    waits: list[float] = []

    async def health() -> None:
        async with client(api_server, timeout=30) as anyone:
            assert (await anyone.get("/healthz")).status_code == 200  # connected
            while not finished.is_set():
                started = time.perf_counter()
                response = await anyone.get("/healthz")
                waits.append(time.perf_counter() - started)
                assert response.status_code == 200
                await asyncio.sleep(0.005)

    async def refused() -> None:
        try:
            for token, path in calls:
                async with client(api_server, token, timeout=30) as caller:
                    for raw in (UNCLOSED, OPEN_ARRAY + UNCLOSED):
                        # How fast is the parse's CPU tests' business (above); here,
                        # that the server refuses and keeps answering meanwhile.
                        response = await caller.post(path, content=raw, headers=JSON)
                        assert response.status_code == 400, response.text
                        assert response.headers["content-type"] == PROBLEM
                        assert response.json()["field"] == "body"
        finally:
            finished.set()

    await asyncio.wait_for(asyncio.gather(health(), refused()), timeout=60)
    assert waits
    # A hang detector, not a latency claim: with the quadratic parse one /healthz waited
    # 28 s behind the body; how long an answer takes is make bench's to measure.
    assert max(waits) < 5, sorted(waits)[-5:]
