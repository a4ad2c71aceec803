"""(e) idle wake-up in parts, next to the bare path it is held to.

tickwork's wake-up (``bench.http``) runs from the enqueue call to the handler's start.
Its parts come from three clocks that are one here (the dispatcher and the bench run
on the same machine): the bench's when it sends the enqueue and when the answer comes
back, the dispatcher's when its claim begins (the lease's expiry less its length), and
the bench's again when the handler starts.

The baseline is the same path with everything tickwork adds taken out
(``bench.bare_longpoll``): one statement that inserts a row and notifies, a LISTEN
connection in a uvicorn process, a long-poll answered with the notification, and a
client loop in this process. Its p99 is measured in the same run, on the same server,
just before tickwork's.

Two references say what the path's shape costs on this machine, whatever runs it: an
HTTP round trip from idle to the bare server with no work in it (``GET /ping``: the hop
an enqueue through HTTP adds to the bare path) and a one-row commit from idle (the
claim's own commit, which the bare path has none of). Their sum with the bare path is
the least a wake-up through an HTTP enqueue and a claim can take here.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import aiohttp
import asyncpg

from bench import Row, harness
from bench.bare_longpoll import CHANNEL
from bench.harness import percentile

SETUP: Final = "CREATE TABLE IF NOT EXISTS bare_wakeup (id bigserial PRIMARY KEY, payload text)"
# One statement, so one transaction: the row and its notification commit together, as
# a queue's enqueue must (a notification for a row not yet visible wakes a poller that
# finds nothing).
ENQUEUE: Final = """
WITH made AS (INSERT INTO bare_wakeup (payload) VALUES ($1) RETURNING payload)
SELECT pg_notify($2, payload) FROM made
"""
WARM_UP: Final = 10  # samples that warm connections and plans, not counted
# Between two samples: long enough for every process on the path to go idle, as a
# worker waiting for work is.
IDLE_SECONDS: Final = 0.02


@dataclass(frozen=True, slots=True)
class Part:
    """One leg of a wake-up: its name and seconds per sample."""

    what: str
    seconds: Sequence[float]


def part_rows(parts: Sequence[Part]) -> list[Row]:
    """A table row per part: samples, p50 and p99 in milliseconds."""
    return [
        {
            "what": part.what,
            "samples": len(part.seconds),
            "p50 ms": round(percentile(part.seconds, 0.5) * 1000, 2),
            "p99 ms": round(percentile(part.seconds, 0.99) * 1000, 2),
        }
        for part in parts
    ]


@contextlib.contextmanager
def bare_server(database_url: str) -> Iterator[str]:
    """A ``bench.bare_longpoll`` process on 127.0.0.1; yields its URL once it answers."""
    port = harness.free_port()
    process = subprocess.Popen(  # noqa: S603 - our own module
        [sys.executable, "-m", "bench.bare_longpoll", database_url, str(port)]
    )
    try:
        harness.wait_for_port(process, port, "the bare long-poll server")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=20)


async def bare_wakeups(database_url: str, url: str, samples: int) -> list[Part]:
    """Seconds from the enqueue statement's call to the client loop holding the
    answer, one at a time, in two parts: the statement (insert, notify, commit) and the
    rest (the notification's delivery, the long-poll's answer)."""
    conn = await asyncpg.connect(database_url)
    answered: dict[str, float] = {}
    arrived = asyncio.Event()

    async def poll(session: aiohttp.ClientSession) -> None:
        while True:
            async with session.get(f"{url}/poll") as answer:
                body = await answer.text()
            if answer.status == 200:
                answered[body] = time.perf_counter()
                arrived.set()

    whole: list[float] = []
    statement: list[float] = []
    rest: list[float] = []
    try:
        await conn.execute(SETUP)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            poller = asyncio.create_task(poll(session))
            try:
                await asyncio.sleep(0.5)  # the client loop is long-polling now
                for n in range(samples + WARM_UP):
                    arrived.clear()
                    sent = time.perf_counter()
                    await conn.execute(ENQUEUE, str(n), CHANNEL)
                    committed = time.perf_counter()
                    await asyncio.wait_for(arrived.wait(), 10)
                    if n >= WARM_UP:
                        got = answered[str(n)]
                        whole.append(got - sent)
                        statement.append(committed - sent)
                        rest.append(got - committed)
                    await asyncio.sleep(IDLE_SECONDS)  # idle again: the loop is back in its poll
            finally:
                poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poller
    finally:
        await conn.close()
    return [
        Part("bare: enqueue statement -> client loop has the answer", whole),
        Part("  enqueue statement (INSERT + NOTIFY, commit)", statement),
        Part("  commit -> client loop has the answer (NOTIFY, long-poll answer)", rest),
    ]


async def idle_round_trips(url: str, samples: int) -> Part:
    """Seconds of an HTTP round trip to the bare server (``GET /ping``, no work), each
    sent after ``IDLE_SECONDS`` of quiet: what one more hop through HTTP costs a
    wake-up on this machine, before any code of tickwork's runs."""
    times: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for n in range(samples + WARM_UP):
            sent = time.perf_counter()
            async with session.get(f"{url}/ping") as answer:
                await answer.read()
            if n >= WARM_UP:
                times.append(time.perf_counter() - sent)
            await asyncio.sleep(IDLE_SECONDS)
    return Part("reference: an HTTP round trip from idle, no work (bare server)", times)
