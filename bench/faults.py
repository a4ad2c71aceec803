"""(j) latency with one shard's link hung, and the edge's bounds on hostile clients:
the figures the fault tests leave to the bench, since a latency asserted under a
loaded test run says more about the machine than about tickwork.

A dispatcher serves 4 shards; shard 1's connections go through a proxy that stops
moving bytes both ways on command (a partition: nothing is refused, nothing arrives).
With that link hung, it measures an enqueue to a job of a healthy shard, a lease of
the healthy shards' runs, and ``/readyz``; then, with the link whole again, how long
until shard 1's runs are leased. At the edge, it times the answer to a request whose
headers never end (``edge.header_timeout_seconds``) and the refusal of a 2 MB body.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp
import orjson

from bench import Context, Table, http, register
from bench.harness import percentile, scaled
from bench.wakeup import WARM_UP, Part, part_rows
from tickwork.core.shards import ShardMap

HUNG: Final = 1  # the shard behind the proxy
SAMPLES: Final = 50
HEALED_WITHIN: Final = 60.0  # seconds a healed shard may take to be leased from again
BIG_BODY: Final = 2 * 1024 * 1024


class HangingProxy:
    """A TCP proxy on 127.0.0.1 to a PostgreSQL server (TCP or its Unix socket), on a
    loop of its own thread. ``hang()`` holds every byte both ways, on open and new
    connections alike, until ``heal()``."""

    def __init__(self, database_url: str) -> None:
        parts = urlsplit(database_url)
        query = dict(parse_qsl(parts.query))
        self._host = query.get("host") or parts.hostname or "127.0.0.1"
        self._port = int(query.get("port") or parts.port or 5432)
        self._loop = asyncio.new_event_loop()
        self._flowing = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    def __enter__(self) -> HangingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def dsn(self, database_url: str) -> str:
        """``database_url`` through this proxy."""
        parts = urlsplit(database_url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k not in {"host", "port"}]
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))

    def hang(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def heal(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    async def _start(self) -> None:
        self._flowing.set()
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._flowing.wait()
        if self._host.startswith("/"):
            upstream = await asyncio.open_unix_connection(f"{self._host}/.s.PGSQL.{self._port}")
        else:
            upstream = await asyncio.open_connection(self._host, self._port)
        await asyncio.gather(
            self._pipe(reader, upstream[1]), self._pipe(upstream[0], writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


async def _timed(session: aiohttp.ClientSession, method: str, url: str, body: bytes) -> float:
    sent = time.perf_counter()
    async with session.request(method, url, data=body) as answer:
        await answer.read()
        if answer.status >= 500:
            raise RuntimeError(f"{method} {url}: {answer.status} {await answer.text()}")
    return time.perf_counter() - sent


async def hung_shard(
    url: str, shard_map: ShardMap, proxy: HangingProxy, samples: int
) -> list[Part]:
    """Enqueues, leases and ``/readyz`` while shard ``HUNG`` hangs, then the time to a
    lease of its runs once healed."""
    healthy = next(
        name
        for name in (f"healthy-{n}" for n in range(100))
        if shard_map.shard_of("bench", name) != HUNG
    )
    stuck = next(
        name
        for name in (f"hung-{n}" for n in range(100))
        if shard_map.shard_of("bench", name) == HUNG
    )
    lease = orjson.dumps(
        {"queues": ["faults"], "max": 1, "waitSeconds": 0, "leaseSeconds": 60, "workerId": "b"}
    )
    enqueue = orjson.dumps({"payload": {}})
    async with http.api_session(http.TEAM) as team, http.api_session(http.ADMIN) as admin:
        for name in (healthy, stuck):
            await http.put_job(team, url, name, {"queue": "faults"})
        proxy.hang()
        enqueues, leases, readyz = [], [], []
        for n in range(samples + WARM_UP):
            took = (
                await _timed(team, "POST", f"{url}/v1/jobs/{healthy}/runs", enqueue),
                await _timed(admin, "POST", f"{url}/v1/lease", lease),
                await _timed(team, "GET", f"{url}/readyz", b""),
            )
            if n >= WARM_UP:
                enqueues.append(took[0])
                leases.append(took[1])
                readyz.append(took[2])
        proxy.heal()
        healed = time.perf_counter()
        recovered = []
        # A run enqueued once the link is whole: the claims sent into the hung link
        # reach the server when it heals, and lease what they find to a caller that
        # gave up on them (until their lease ends), so the run from before is not the
        # measure of the dispatcher coming back.
        enqueued = False
        while time.perf_counter() - healed < HEALED_WITHIN:
            if not enqueued:
                async with team.post(f"{url}/v1/jobs/{stuck}/runs", data=enqueue) as answer:
                    await answer.read()
                    enqueued = answer.status == 201
            if enqueued:
                async with admin.post(f"{url}/v1/lease", data=lease) as answer:
                    got = orjson.loads(await answer.read()).get("leases", [])
                if any(item["job"] == stuck for item in got):
                    recovered.append(time.perf_counter() - healed)
                    break
            await asyncio.sleep(0.05)
    return [
        Part(f"enqueue to a healthy shard, shard {HUNG} hung", enqueues),
        Part(f"lease (healthy shards' runs), shard {HUNG} hung", leases),
        Part(f"/readyz, shard {HUNG} hung", readyz),
        Part(f"shard {HUNG} healed -> a run enqueued there leased", recovered),
    ]


async def edge(url: str) -> list[Part]:
    """A request whose headers never end: seconds until the server answers or closes;
    a 2 MB body (a job whose cron expression is 2 MB long): seconds to its refusal."""
    host, port = urlsplit(url).hostname or "127.0.0.1", urlsplit(url).port or 80
    reader, writer = await asyncio.open_connection(host, port)
    sent = time.perf_counter()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nX-Slow: ")
    await writer.drain()
    await reader.read()  # the 408, then the close
    slow = time.perf_counter() - sent
    writer.close()
    body = orjson.dumps({"schedule": {"cron": "*" * BIG_BODY}, "queue": "faults"})
    async with http.api_session(http.TEAM) as team:
        sent = time.perf_counter()
        async with team.put(f"{url}/v1/jobs/too-big", data=body) as answer:
            await answer.read()
            if answer.status < 400 or answer.status >= 500:
                raise RuntimeError(f"a 2 MB job was answered {answer.status}")
        big = time.perf_counter() - sent
    return [
        Part("headers never end -> answered (edge.header_timeout_seconds: 10)", [slow]),
        Part("a 2 MB job body -> refused", [big]),
    ]


@contextlib.contextmanager
def _proxied_dispatcher(database_url: str) -> Iterator[tuple[str, HangingProxy]]:
    with HangingProxy(database_url) as proxy:
        dsns = [database_url] * http.SHARDS
        dsns[HUNG] = proxy.dsn(database_url)
        with http.dispatcher(" ".join(dsns)) as url:
            yield url, proxy


@register("faults", "(j) latency with one shard's link hung; the edge's bounds")
def faults_case(context: Context) -> list[Table]:
    shard_map = asyncio.run(http.migrate(context.database_url))
    # Each sample waits readiness_timeout_seconds on /readyz: a smoke run takes few.
    samples = scaled(SAMPLES, least=3)
    with _proxied_dispatcher(context.database_url) as (url, proxy):

        async def both() -> tuple[list[Part], list[Part]]:
            edge_task = asyncio.create_task(edge(url))
            hung = await hung_shard(url, shard_map, proxy, samples)
            return hung, await edge_task

        hung, bounds = asyncio.run(both())
    for part, key in zip(hung[:3], ("enqueue", "lease", "readyz"), strict=True):
        context.figures[f"hung_shard_{key}_p99_ms"] = round(
            percentile(part.seconds, 0.99) * 1000, 2
        )
    if hung[3].seconds:
        context.figures["healed_shard_leased_after_s"] = round(hung[3].seconds[0], 2)
    return [
        Table(
            f"(j) one shard's link hung ({http.SHARDS} shards): what the others' callers see",
            part_rows([*hung, *bounds]),
            notes=[
                "the hung link holds every byte both ways (a partition), on open and new "
                "connections alike",
                "a 2 MB body is over the API's body limit: refused before it is parsed",
                "/readyz waits readiness_timeout_seconds (1 s) for the hung shard, and answers "
                "200 while another shard answers",
            ],
        )
    ]
