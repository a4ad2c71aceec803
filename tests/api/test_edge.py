"""The HTTP edge, with real sockets on 127.0.0.1: slow or endless requests are answered
408 and closed, oversized headers 431, connections over the cap 503, and a request is
authenticated before its body is read.

What is asserted is the answer and the close; the waits on them are bounds that only
catch a hang. How long the edge takes to give up on a slow client is measured by make
bench."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import conftest
import httpx
import orjson
import pytest
from conftest import TEAM_TOKEN, WORKER_TOKEN
from fastapi import FastAPI, Request
from polling import eventually
from starlette.responses import Response

from tickwork.api import edge as api_edge
from tickwork.api.server import HttpServer
from tickwork.api.services import Services
from tickwork.core.settings import ApiSettings, EdgeSettings
from tickwork.engine.installation import Installation
from tickwork.engine.metrics import Metrics
from tickwork.store.database import Database

# Short limits keep the tests fast.
LIMITS = EdgeSettings(
    header_timeout_seconds=0.3, max_header_bytes=4096, max_connections=16, linger_seconds=0.3
)
BODY_SECONDS = 0.3
PROBLEM = "application/problem+json"


@dataclass
class Edge:
    url: str
    host: str
    port: int


@contextlib.asynccontextmanager
async def serving(database: Database, limits: EdgeSettings = LIMITS) -> AsyncIterator[Edge]:
    services = Services(
        engine=Installation.over(database),
        authenticator=conftest.test_tokens(),
        metrics=Metrics(),
        settings=ApiSettings(body_timeout_seconds=BODY_SECONDS),
    )
    async with conftest.served(services, limits) as url:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        yield Edge(url, parts.hostname, parts.port)


@pytest.fixture
async def edge(database: Database) -> AsyncIterator[Edge]:
    async with serving(database) as served:
        yield served


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def problem(self) -> dict[str, object]:
        assert self.headers["content-type"] == PROBLEM
        document = orjson.loads(self.body)
        assert isinstance(document, dict) and document["status"] == self.status
        return document


async def read_answer(reader: asyncio.StreamReader, within: float = 10.0) -> Answer:
    async with asyncio.timeout(within):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Answer(status, headers, body)


async def closed(reader: asyncio.StreamReader, within: float = 10.0) -> bool:
    """Whether the server closes the connection within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            return await reader.read() == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@contextlib.asynccontextmanager
async def raw(edge: Edge) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection(edge.host, edge.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def head(method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: tickwork", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def trickle(writer: asyncio.StreamWriter, data: bytes, every: float = 0.05) -> None:
    """Send ``data`` a byte at a time, forever if it runs out (until cancelled)."""
    with contextlib.suppress(ConnectionError):
        while True:
            for index in range(len(data)):
                writer.write(data[index : index + 1])
                await writer.drain()
                await asyncio.sleep(every)


async def test_a_connection_that_sends_nothing_is_closed(edge: Edge) -> None:
    async with raw(edge) as (reader, _):
        assert await closed(reader)


async def test_headers_trickled_in_get_408_and_a_close(edge: Edge) -> None:
    async def slowloris() -> None:
        async with raw(edge) as (reader, writer):
            writer.write(b"POST /v1/lease HTTP/1.1\r\nHost: tickwork\r\n")
            sending = asyncio.create_task(trickle(writer, b"X-Padding: aaaaaaaaaaaaaaaa\r\n"))
            try:
                answer = await read_answer(reader)
            finally:
                sending.cancel()
            assert answer.status == 408
            assert answer.problem()["type"] == "https://tickwork.dev/problems/request-timeout"
            assert await closed(reader)

    # A byte every 50 ms: only a deadline for the whole head ends them, not one per read.
    await asyncio.gather(*(slowloris() for _ in range(12)))


async def test_oversized_headers_get_431(edge: Edge) -> None:
    big = "X-Big: " + "a" * 8000
    async with raw(edge) as (reader, writer):  # complete, in one piece
        writer.write(head("GET", "/healthz", big))
        answer = await read_answer(reader)
        assert answer.status == 431
        assert answer.problem()["type"] == "https://tickwork.dev/problems/headers-too-large"
        assert await closed(reader)
    async with raw(edge) as (reader, writer):  # a header that never ends
        writer.write(b"GET /healthz HTTP/1.1\r\nX-Endless: ")
        for _ in range(5):
            writer.write(b"a" * 1024)
        answer = await read_answer(reader)  # refused before the end of the headers
        assert answer.status == 431
        assert await closed(reader)


async def test_a_body_trickled_in_gets_408(edge: Edge) -> None:
    async with raw(edge) as (reader, writer):
        writer.write(
            head("POST", "/v1/lease", f"Authorization: Bearer {WORKER_TOKEN}", "Content-Length: 64")
        )
        sending = asyncio.create_task(trickle(writer, b'{"queues": ["default"]}'))
        try:
            answer = await read_answer(reader)
        finally:
            sending.cancel()
        assert answer.status == 408, answer
        assert answer.problem()["type"] == "https://tickwork.dev/problems/request-timeout"
        assert await closed(reader)  # after a lingering close: the trickle goes nowhere


async def test_chunks_sent_forever_get_408(edge: Edge) -> None:
    async with raw(edge) as (reader, writer):
        writer.write(
            head(
                "PUT",
                "/v1/jobs/report",
                f"Authorization: Bearer {TEAM_TOKEN}",
                "Transfer-Encoding: chunked",
            )
        )

        async def chunks() -> None:
            with contextlib.suppress(ConnectionError):
                while True:
                    writer.write(b"1\r\n \r\n")
                    await writer.drain()
                    await asyncio.sleep(0.02)

        sending = asyncio.create_task(chunks())
        try:
            answer = await read_answer(reader)
        finally:
            sending.cancel()
        assert answer.status == 408, answer
        assert await closed(reader)


async def test_connections_over_the_cap_get_503_at_once(database: Database) -> None:
    limits = EdgeSettings(header_timeout_seconds=10, max_connections=4, linger_seconds=0.3)
    async with serving(database, limits) as edge, contextlib.AsyncExitStack() as stack:
        held = [await stack.enter_async_context(raw(edge)) for _ in range(4)]
        async with raw(edge) as (reader, _):
            # Sooner than the header timeout (10 s), after which a 408 would come.
            answer = await read_answer(reader, within=5.0)
            assert answer.status == 503
            assert answer.problem()["type"] == "https://tickwork.dev/problems/server-busy"
            assert int(answer.headers["retry-after"]) >= 1
            assert await closed(reader)
        # The held connections still work, and once one goes a newcomer gets in.
        reader, writer = held[0]
        writer.write(head("GET", "/healthz"))
        assert (await read_answer(reader)).status == 200
        writer.close()
        await writer.wait_closed()
        async with httpx.AsyncClient(base_url=edge.url) as http:

            async def let_in() -> bool:
                return (await http.get("/healthz")).status_code == 200

            # Refused (503) until the server has seen the close.
            await eventually(let_in, what="a newcomer served")


async def test_keep_alive_and_split_headers_still_work(edge: Edge) -> None:
    async with raw(edge) as (reader, writer):
        request = head("GET", "/v1/jobs/report", f"Authorization: Bearer {TEAM_TOKEN}")
        for piece in (request[:10], request[10:30], request[30:]):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.02)
        assert (await read_answer(reader)).status == 404
        writer.write(head("GET", "/healthz"))  # the same connection, a second request
        assert (await read_answer(reader)).status == 200


async def test_authentication_comes_before_the_body(edge: Edge) -> None:
    async with httpx.AsyncClient(base_url=edge.url) as http:
        for headers in ({}, {"Authorization": "Bearer not-a-known-token"}):
            response = await http.post("/v1/lease", content=b"{not json", headers=headers)
            assert response.status_code == 401, response.text
            response = await http.put("/v1/jobs/report", content=b"[", headers=headers)
            assert response.status_code == 401, response.text
        worker = {"Authorization": f"Bearer {WORKER_TOKEN}"}
        response = await http.post("/v1/lease", content=b"{not json", headers=worker)
        assert response.status_code == 400
    async with raw(edge) as (reader, writer):  # a body announced but never sent
        writer.write(head("POST", "/v1/lease", "Content-Length: 100000"))
        answer = await read_answer(reader)
        assert answer.status == 401  # waiting for the body would have ended in a 408
        assert await closed(reader)  # its body never came: closed after the linger


async def test_two_authorization_headers_are_refused(edge: Edge) -> None:
    async with httpx.AsyncClient(base_url=edge.url) as http:
        response = await http.get(
            "/v1/jobs/report",
            headers=[("Authorization", f"Bearer {TEAM_TOKEN}"), ("Authorization", "Bearer x")],
        )
    assert response.status_code == 400
    problem = response.json()
    assert problem["type"] == "https://tickwork.dev/problems/invalid-request"
    assert problem["field"] == "Authorization"


async def test_a_refused_body_that_arrives_whole_leaves_the_connection_usable(
    edge: Edge,
) -> None:
    """An answer given before the body was read lingers: the client that goes on
    sending its body reads the answer, and then its next request is served."""
    async with raw(edge) as (reader, writer):
        body = b"x" * 20_000
        writer.write(head("PUT", "/v1/jobs/report", f"Content-Length: {len(body)}"))
        assert (await read_answer(reader)).status == 401
        writer.write(body)
        writer.write(head("GET", "/healthz"))
        assert (await read_answer(reader)).status == 200


async def test_a_request_tells_from_its_connection_when_its_client_went_away() -> None:
    # A woken long-poll asks this before answering: from the connection, no loop turn.
    app = FastAPI()
    entered, seen = asyncio.Event(), asyncio.Event()
    found: dict[str, object] = {}

    @app.get("/probe")
    async def probe(request: Request) -> Response:
        gone = api_edge.client_gone(request)
        found["served by the connection"] = api_edge.CLIENT_GONE in request.scope["extensions"]
        found["gone at first"] = await gone()
        entered.set()
        async with asyncio.timeout(5):
            while not await gone():  # noqa: ASYNC110 - a connection's state has no event
                await asyncio.sleep(0.01)
        seen.set()
        return Response()

    server = HttpServer(app, port=0, limits=LIMITS)
    url = urlsplit(await server.start())
    assert url.hostname is not None and url.port is not None
    try:
        _, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.write(head("GET", "/probe"))
        await asyncio.wait_for(entered.wait(), 5)
        writer.close()
        await asyncio.wait_for(seen.wait(), 5)
    finally:
        await server.stop()
    assert found == {"served by the connection": True, "gone at first": False}


async def test_accepted_connections_send_without_nagles_delay() -> None:
    """asyncio turns Nagle's algorithm off only on sockets that say they are TCP: the
    answer to a keep-alive request otherwise waited for the client's delayed ACK (about
    40 ms a call on Linux)."""
    from tickwork.api.server import listen

    sock = listen("127.0.0.1", 0)
    accepted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raw = writer.get_extra_info("socket")
        accepted.set_result(bool(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
        writer.close()

    server = await asyncio.start_server(on_connect, sock=sock)
    try:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(accepted, 5)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
