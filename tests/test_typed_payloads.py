"""Typed payloads: a handler whose second parameter is annotated with a type pydantic
validates gets the payload parsed into it; a payload that does not validate fails the
run for good, naming the fields. End to end with a worker on the real API, and the
registration rules on their own."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from conftest import ApiServer
from test_worker import Results, enqueue, make_worker, put_job, running
from typing_extensions import TypedDict  # pydantic's choice on Python < 3.12

from tickwork.core.records import State
from tickwork.worker import RunContext, Worker

pytestmark = pytest.mark.timeout(30)


class Line(pydantic.BaseModel):
    sku: str
    amount: float


class Invoice(pydantic.BaseModel):
    customer: str
    lines: list[Line]


class Totals(TypedDict):
    total: int


async def test_a_worker_parses_typed_payloads_and_fails_invalid_ones_for_good(
    api_server: ApiServer,
) -> None:
    await put_job(api_server, "bill", retry={"maxAttempts": 5, "baseSeconds": 0, "maxSeconds": 0})
    good = await enqueue(
        api_server, "bill", {"customer": "c-1", "lines": [{"sku": "a", "amount": "2.5"}]}
    )
    bad = await enqueue(api_server, "bill", {"customer": "c-2", "lines": [{"sku": "b"}]})
    results = Results()
    worker = make_worker(api_server, results)
    seen: list[Invoice] = []

    @worker.handler(job="bill")
    async def bill(ctx: RunContext, invoice: Invoice) -> None:
        seen.append(invoice)

    async with running(worker):
        found = {r.run_id: r for r in await results.wait(2)}

    assert seen == [Invoice(customer="c-1", lines=[Line(sku="a", amount=2.5)])]
    assert found[good].state == "succeeded"
    assert (found[bad].state, found[bad].retryable) == ("dead", False)
    message = (
        "InvalidPayload: the payload is not a valid Invoice: "
        "payload.lines[0].amount: Field required"
    )
    assert found[bad].message == message
    run, attempts = await api_server.jobs.run(bad)
    assert run.state is State.dead and len(attempts) == 1  # no retry can fix it
    assert (run.last_error["message"], run.last_error["retryable"]) == (message, False)


def _register(function: Any) -> Worker:
    worker = Worker("http://unused", "token")
    worker.register(function, job="job")
    return worker


def test_which_handlers_take_the_payload() -> None:
    from tickwork.worker.handlers import prepare

    def context_only(ctx: RunContext) -> None: ...
    def raw(ctx: RunContext, payload: Any) -> None: ...
    def unannotated(ctx, payload):  # type: ignore[no-untyped-def]
        ...
    def optional(ctx: RunContext, extra: int = 0) -> None: ...
    def typed(ctx: RunContext, totals: Totals) -> None: ...
    def listed(ctx: RunContext, numbers: list[int]) -> None: ...

    class Callable:
        async def __call__(self, ctx: RunContext, invoice: Invoice) -> None: ...

    assert not prepare(context_only).takes_payload
    assert not prepare(optional).takes_payload  # a default: not the payload's place
    assert not prepare(lambda *args: None).takes_payload
    for function in (raw, unannotated):
        calling = prepare(function)
        assert calling.takes_payload and calling.payload_type is None
    assert prepare(typed).type_name == "Totals"
    assert prepare(listed).type_name == "list[int]"
    instance = prepare(Callable())
    assert instance.is_async and instance.type_name == "Invoice"


def test_a_handler_that_cannot_be_called_is_refused_when_registered() -> None:
    def three(ctx: RunContext, payload: Any, more: Any) -> None: ...

    with pytest.raises(TypeError, match=r"takes \(ctx\) or \(ctx, payload\)"):
        _register(three)

    class Local(pydantic.BaseModel):
        n: int

    def local(ctx: RunContext, payload: Local) -> None: ...

    with pytest.raises(TypeError, match="cannot resolve the annotation 'Local'"):
        _register(local)

    class Opaque:
        pass

    def opaque(ctx: RunContext, payload: Opaque) -> None: ...

    opaque.__annotations__["payload"] = Opaque  # resolved, but nothing pydantic validates
    with pytest.raises(TypeError, match="pydantic cannot validate a payload as Opaque"):
        _register(opaque)
