"""``tickwork.client`` against the real API on a real PostgreSQL: what a team's
application does (enqueue, batch, read, list, cancel), sync and async, each refusal as
its exception class, the retries (429 with ``Retry-After``, connection errors, an
answer lost after the run was made) and a token file that rotates.

The blocking ``Client`` runs in a thread: the API answers on this test's event loop.
Waits between retries go through an injected ``sleep`` that records them (and moves
the quota's frozen clock): no test sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pydantic
import pytest
from conftest import ApiServer
from test_worker import free_port, put_job

from tickwork.client import (
    PROBLEM_CLASSES,
    ApiError,
    ApiUnreachable,
    AsyncClient,
    Client,
    ConcurrencyLimit,
    Forbidden,
    IdempotencyKeyReused,
    InvalidRequest,
    InvalidState,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    Run,
    RunRequest,
    State,
    TokenFile,
    Unauthenticated,
)
from tickwork.core.clock import FrozenClock
from tickwork.engine.quotas import TenantLimits, TenantQuotas
from tickwork.worker import WorkerClient

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[1]


class Sleeps:
    """An injected ``sleep``: records each wait, and moves ``clock`` by it."""

    def __init__(self, clock: FrozenClock | None = None) -> None:
        self.waits: list[float] = []
        self.clock = clock
        self.then: Callable[[], object] | None = None  # called at the first wait

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.clock is not None:
            self.clock.advance(seconds)
        if self.then is not None:
            then, self.then = self.then, None
            then()

    async def async_sleep(self, seconds: float) -> None:
        self(seconds)


def async_client(
    api_server: ApiServer, sleeps: Sleeps | None = None, **options: Any
) -> AsyncClient:
    sleeps = sleeps or Sleeps()
    options.setdefault("rng", random.Random(7))
    return AsyncClient(
        options.pop("url", api_server.url),
        options.pop("token", api_server.team_token),
        sleep=sleeps.async_sleep,
        **options,
    )


def sync_client(api_server: ApiServer, sleeps: Sleeps | None = None, **options: Any) -> Client:
    sleeps = sleeps or Sleeps()
    options.setdefault("rng", random.Random(7))
    return Client(
        options.pop("url", api_server.url),
        options.pop("token", api_server.team_token),
        sleep=sleeps,
        **options,
    )


async def runs_of(api_server: ApiServer, job: str) -> list[Run]:
    async with async_client(api_server) as tickwork:
        return [run async for run in tickwork.list_runs(job)]


class Invoice(pydantic.BaseModel):
    customer: str
    amount: float


# What an application does


async def test_async_client_enqueues_reads_lists_and_cancels(api_server: ApiServer) -> None:
    await put_job(api_server, "export", queue="billing", payload={"format": "csv"})
    sleeps = Sleeps()
    async with async_client(api_server, sleeps) as tickwork:
        plain = await tickwork.enqueue("export")
        assert (plain.job, plain.queue, plain.state, plain.created) == (
            "export",
            "billing",
            State.ready,
            True,
        )
        assert plain.payload == {"format": "csv"}  # the job's payload when none is given
        typed = await tickwork.enqueue(
            "export", Invoice(customer="c-1", amount=12.5), priority="critical"
        )
        assert typed.payload == {"customer": "c-1", "amount": 12.5}
        assert typed.priority == "critical"
        later = await tickwork.enqueue("export", {"n": 1}, delay=timedelta(hours=1))
        assert later.state is State.scheduled
        assert later.ready_at is not None and later.ready_at > datetime.now(UTC)
        at = datetime(2099, 1, 1, 2, 0, tzinfo=UTC)
        scheduled = await tickwork.enqueue("export", {"n": 2}, run_at=at)
        assert scheduled.ready_at == at

        first = await tickwork.enqueue("export", {"n": 3}, idempotency_key="invoice-42")
        again = await tickwork.enqueue("export", {"n": 3}, idempotency_key="invoice-42")
        assert (first.created, again.created) == (True, False)
        assert again.run_id == first.run_id and again.idempotency_key == "invoice-42"

        # Newest first, page after page, as the iteration goes.
        listed = [run.run_id async for run in tickwork.list_runs("export", page_size=2)]
        made = [plain, typed, later, scheduled, first]
        assert listed == [run.run_id for run in reversed(made)]
        waiting = [run.run_id async for run in tickwork.list_runs("export", state="scheduled")]
        assert waiting == [scheduled.run_id, later.run_id]
        page = await tickwork.runs_page("export", state=State.ready, limit=1)
        assert [run.run_id for run in page.items] == [first.run_id]
        assert page.next_cursor is not None

        shown = await tickwork.get_run(typed.run_id)
        assert shown.attempts == () and shown.payload == typed.payload
        cancelled = await tickwork.cancel(typed.run_id)
        assert cancelled.state is State.cancelled and cancelled.finished
        assert (await tickwork.cancel(typed.run_id)).state is State.cancelled  # idempotent
    assert sleeps.waits == []


def _sync_calls(client: Client) -> dict[str, Any]:
    with client as tickwork:
        run = tickwork.enqueue("report", {"day": 1}, delay=30)
        items = tickwork.enqueue_many(
            "report", [RunRequest({"day": 2}), RunRequest({"day": 3}, idempotency_key="d3")]
        )
        runs = list(tickwork.list_runs("report", page_size=1))
        shown = tickwork.get_run(run.run_id)
        cancelled = tickwork.cancel(run.run_id)
        return {"run": run, "items": items, "runs": runs, "shown": shown, "cancelled": cancelled}


async def test_sync_client_makes_the_same_calls(api_server: ApiServer) -> None:
    await put_job(api_server, "report")
    found = await asyncio.to_thread(_sync_calls, sync_client(api_server))
    run, items = found["run"], found["items"]
    assert run.state is State.scheduled and run.payload == {"day": 1}
    assert [item.payload for item in items] == [{"day": 2}, {"day": 3}]
    assert items[1].idempotency_key == "d3"
    assert [r.run_id for r in found["runs"]] == [items[1].run_id, items[0].run_id, run.run_id]
    assert found["shown"].attempts == ()
    assert found["cancelled"].state is State.cancelled


async def test_a_batch_answers_each_item_and_can_be_repeated(api_server: ApiServer) -> None:
    await put_job(api_server, "import")
    async with async_client(api_server) as tickwork:
        await tickwork.enqueue("import", {"row": 0}, idempotency_key="row-0")
        requests = [
            RunRequest({"row": 1}, idempotency_key="row-1"),
            RunRequest({"row": 2}, delay=-1),
            RunRequest({"row": "other"}, idempotency_key="row-0"),
            RunRequest(run_at=datetime(2099, 1, 1, tzinfo=UTC)),
        ]
        made = await tickwork.enqueue_many("import", requests)
        assert isinstance(made[0], Run) and made[0].payload == {"row": 1}
        assert isinstance(made[1], InvalidRequest) and made[1].field == "runs[1].delaySeconds"
        assert isinstance(made[2], IdempotencyKeyReused)
        assert made[2].field == "runs[2].idempotencyKey" and made[2].status == 422
        assert isinstance(made[3], Run) and made[3].state is State.scheduled
        assert made[3].idempotency_key.startswith("client-")  # made up for the item

        again = await tickwork.enqueue_many("import", [requests[0]])
        assert isinstance(again[0], Run) and again[0].run_id == made[0].run_id
        assert await tickwork.enqueue_many("import", []) == []
        with pytest.raises(ValueError, match="up to 1000 runs"):
            await tickwork.enqueue_many("import", [RunRequest()] * 1001)
        runs = [run async for run in tickwork.list_runs("import")]
        assert len(runs) == 3


# Refusals, each as its own class


async def test_each_refusal_is_raised_as_its_problem_class(api_server: ApiServer) -> None:
    await put_job(api_server, "single", concurrency=1)
    sleeps = Sleeps()
    async with async_client(api_server, sleeps) as tickwork:
        with pytest.raises(NotFound) as missing:
            await tickwork.get_run("r0-999999")
        assert (missing.value.status, missing.value.slug) == (404, "not-found")
        with pytest.raises(NotFound, match="no job 'nope'"):
            await tickwork.enqueue("nope")

        running = await tickwork.enqueue("single", if_not_running=True)
        async with WorkerClient(api_server.url, api_server.worker_token) as worker:
            [lease] = await worker.lease(["default"], worker_id="test")
            assert lease.run_id == running.run_id
            with pytest.raises(ConcurrencyLimit) as busy:
                await tickwork.enqueue("single", if_not_running=True)
            assert busy.value.status == 409 and busy.value.field == "ifNotRunning"
            await worker.complete(lease.run_id, lease.fencing_token, "succeeded")

        with pytest.raises(PayloadTooLarge) as large:
            await tickwork.enqueue("single", {"blob": "x" * 300_000})
        assert large.value.status == 413

        await tickwork.enqueue("single", {"n": 1}, idempotency_key="k-1")
        with pytest.raises(IdempotencyKeyReused) as reused:
            await tickwork.enqueue("single", {"n": 2}, idempotency_key="k-1")
        assert (reused.value.status, reused.value.field) == (422, "Idempotency-Key")

        with pytest.raises(InvalidRequest) as secret:
            await tickwork.enqueue("single", {"db": {"password": "hunter22"}})
        assert secret.value.field == "payload.db.password"

        with pytest.raises(ValueError, match="aware datetime"):
            await tickwork.enqueue("single", run_at=datetime(2099, 1, 1))
        with pytest.raises(ValueError, match="at most one of run_at and delay"):
            await tickwork.enqueue("single", run_at=datetime.now(UTC), delay=1)

        with pytest.raises(InvalidState) as finished:
            await tickwork.cancel(running.run_id)
        assert finished.value.status == 409 and "succeeded" in finished.value.detail
    done = running.run_id

    async with async_client(api_server, sleeps, token="no-such-token") as stranger:
        with pytest.raises(Unauthenticated):
            await stranger.get_run(done)
    async with async_client(api_server, sleeps, token=api_server.worker_token) as worker:
        with pytest.raises(Forbidden) as refused:
            await worker.enqueue("single")
        assert isinstance(refused.value, ApiError) and refused.value.status == 403
    assert sleeps.waits == []  # none of these is worth a retry


def test_there_is_one_class_per_problem_of_the_contract() -> None:
    """docs/http-api.md's Problems table, and no other."""
    table = (ROOT / "docs" / "http-api.md").read_text().split("## Problems", 1)[1]
    listed = set(re.findall(r"^\| \d{3} \| `([a-z-]+)` \|", table, re.MULTILINE))
    assert {cls.slug for cls in PROBLEM_CLASSES} == listed
    assert all(issubclass(cls, ApiError) for cls in PROBLEM_CLASSES)


# Retries


async def test_over_the_quota_the_call_waits_what_retry_after_says(
    api_server: ApiServer, clock: FrozenClock
) -> None:
    api_server.services.quota = TenantQuotas(
        api_server.database, TenantLimits(enqueue_rate=0.5, enqueue_burst=1), clock=clock
    )
    await put_job(api_server, "throttled")
    sleeps = Sleeps(clock)
    async with async_client(api_server, sleeps, retry_base_seconds=0.5) as tickwork:
        await tickwork.enqueue("throttled")
        run = await tickwork.enqueue("throttled")  # 429 Retry-After: 2, then through
        assert run.created
        [waited] = sleeps.waits
        assert 2.0 <= waited <= 2.5  # what the server asked, and a jitter on top
    # Asking for longer than the client waits: raised at once, saying how long.
    async with async_client(api_server, sleeps, max_retry_after=1) as impatient:
        with pytest.raises(QuotaExceeded) as refused:
            await impatient.enqueue("throttled")
    assert refused.value.status == 429 and refused.value.retry_after == 2.0
    assert len(sleeps.waits) == 1
    assert len(await runs_of(api_server, "throttled")) == 2


def test_no_answer_is_retried_a_bounded_number_of_times() -> None:
    sleeps = Sleeps()
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = Client(url, "token", sleep=sleeps, retries=3, retry_max_seconds=1)
    with pytest.raises(ApiUnreachable, match=r"127\.0\.0\.1"):
        client.enqueue("anything")
    assert len(sleeps.waits) == 3
    ceilings = [0.5, 1, 1]  # 0.5 doubling, capped at retry_max_seconds
    assert all(0 <= wait <= top for wait, top in zip(sleeps.waits, ceilings, strict=True))
    assert len(set(sleeps.waits)) == 3  # full jitter: drawn, not fixed


@dataclass
class LosingProxy:
    """Forwards 127.0.0.1:``port`` to the API, but resets the first ``lose`` connections
    once the API's answer starts to come back: the request was served, its answer lost."""

    upstream_port: int
    lose: int = 1
    port: int = 0
    lost: int = 0

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{self.port}"
        finally:
            server.close()
            await server.wait_closed()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        losing = self.lost < self.lose

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()

        async def answer() -> None:
            data = await up_reader.read(65536)
            if losing and data:
                self.lost += 1
                writer.transport.abort()
                return
            writer.write(data)
            await pipe(up_reader, writer)

        with contextlib.suppress(OSError):
            await asyncio.gather(pipe(reader, up_writer), answer())
        up_writer.close()
        writer.close()


async def test_an_enqueue_whose_answer_was_lost_is_retried_and_makes_one_run(
    api_server: ApiServer,
) -> None:
    await put_job(api_server, "once")
    proxy = LosingProxy(int(api_server.url.rsplit(":", 1)[1]))
    sleeps = Sleeps()
    async with proxy.serving() as url:
        client = sync_client(api_server, sleeps, url=url)
        run = await asyncio.to_thread(client.enqueue, "once", {"n": 1})
        client.close()
    assert proxy.lost == 1 and len(sleeps.waits) == 1
    assert run.created  # the first try made it; the key it made up is this call's own
    assert [r.run_id for r in await runs_of(api_server, "once")] == [run.run_id]


# Tokens


async def test_a_rotated_token_file_is_read_again_when_the_api_refuses_the_old_token(
    api_server: ApiServer, tmp_path: Path
) -> None:
    await put_job(api_server, "rotated")
    path = tmp_path / "token"
    path.write_text("expired-token\n")
    source = TokenFile(path)
    path.write_text(api_server.team_token + "\n")  # the kubelet rotated it since
    sleeps = Sleeps()
    async with async_client(api_server, sleeps, token=source) as tickwork:
        run = await tickwork.enqueue("rotated")
    assert run.created and sleeps.waits == []
    assert source.token() == api_server.team_token

    environ = {"TICKWORK_URL": api_server.url, "TICKWORK_TOKEN_FILE": str(path)}
    with Client.from_env(environ, sleep=sleeps) as client:
        shown = await asyncio.to_thread(client.get_run, run.run_id)
    assert shown.run_id == run.run_id
    path.write_text("no-such-token")
    async with AsyncClient.from_env(environ, sleep=sleeps.async_sleep) as refused:
        with pytest.raises(Unauthenticated):
            await refused.get_run(run.run_id)


def test_from_env_needs_a_url_and_one_token() -> None:
    with pytest.raises(ValueError, match="TICKWORK_URL"):
        Client.from_env({"TICKWORK_TOKEN": "t"})
    with pytest.raises(ValueError, match="not both"):
        Client.from_env(
            {"TICKWORK_URL": "http://api", "TICKWORK_TOKEN": "t", "TICKWORK_TOKEN_FILE": "/f"}
        )
    client = Client.from_env(
        {"TICKWORK_URL": "http://api:8080/", "TICKWORK_TOKEN": "t", "TICKWORK_TENANT": "acme"},
        retries=0,
    )
    assert (client.url, client.tenant) == ("http://api:8080", "acme")


def test_the_options_table_is_the_clients_signature() -> None:
    text = (ROOT / "docs" / "client.md").read_text()
    table = text.split("<!-- client options -->", 1)[1].split("<!-- /client options -->")[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, re.MULTILINE)
    for cls in (Client, AsyncClient):
        parameters = inspect.signature(cls).parameters
        assert [name for name, _ in rows] == [p for p in parameters if p not in ("url", "token")]
        for name, default in rows:
            value = parameters[name].default
            if isinstance(value, int | float) and not isinstance(value, bool):
                assert default.strip() == f"`{value:g}`", name
