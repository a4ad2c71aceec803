"""Notifications: a run gone dead and a job auto-paused become runs of the system job
``tickwork.notify``, made in the transaction that ends the run; the delivery leases them
through the dispatcher and posts them, signed, to a real receiver on 127.0.0.1. A
receiver that fails for two (injected-clock) minutes gets every notification once it
recovers, each with a stable idempotency key; a job without notify (and no default
target) sends nothing; a delivery that dies notifies nobody."""

from __future__ import annotations

import hashlib
import hmac
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime

import orjson
import pytest
from aiohttp import web

from tickwork.cli.webhooks import WebhookPoster
from tickwork.core.clock import FrozenClock
from tickwork.core.errors import InvalidRequest
from tickwork.core.records import Completion, Lease, Outcome, State
from tickwork.core.spec import NOTIFY_JOB, NOTIFY_QUEUE, JobSpec, Notify, NotifyEvent, Retry
from tickwork.engine.dispatch import Dispatcher
from tickwork.engine.jobs import EnqueueRequest, Jobs
from tickwork.engine.notifications import Deliveries, Targets
from tickwork.store import leases, sweeps
from tickwork.store.database import Database
from tickwork.store.notifications import Target

TENANT = "acme"
SECRET = "s3cret-key"
ENVIRON = {"TICKWORK_TEST_HOOK_KEY": SECRET}


@dataclass
class Receiver:
    """A webhook receiver that answers 503 while ``failing``."""

    url: str = ""
    failing: bool = False
    refused: int = 0
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.failing:
            self.refused += 1
            return web.Response(status=503)
        self.received.append((dict(request.headers), body))
        return web.Response(status=204)

    def bodies(self) -> list[dict[str, object]]:
        return [orjson.loads(body) for _, body in self.received]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/hook", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    found.url = f"http://127.0.0.1:{port}/hook"
    yield found
    await runner.cleanup()


@pytest.fixture
async def poster() -> AsyncIterator[WebhookPoster]:
    made = WebhookPoster()
    yield made
    await made.aclose()


def target(receiver: Receiver, name: str = "ops", *, default: bool = False) -> Target:
    return Target(
        name,
        receiver.url,
        "json",
        {"env": "TICKWORK_TEST_HOOK_KEY"},
        default,
        datetime.now().astimezone(),
        "test",
    )


async def _die(jobs: Jobs, clock: FrozenClock, job: str, message: str = "boom") -> Lease:
    """One run of ``job`` leased and failed out of its single attempt."""
    await jobs.enqueue(TENANT, job, EnqueueRequest(), "test")
    shard = jobs.shard_of(TENANT, job)
    async with jobs.database.connection(shard) as conn:
        [lease] = await leases.claim(conn, shard, ["default"], 1, "w", 30, clock.now())
        completion = Completion(lease.id, lease.fencing_token, Outcome.failed, {"message": message})
        [answer] = await leases.complete(conn, shard, [completion], clock.now())
    assert answer.state is State.dead  # type: ignore[union-attr]
    return lease


async def _nightly_died(database: Database, clock: FrozenClock, receiver: Receiver) -> Lease:
    """A run of job nightly dead, ``receiver`` its tenant's default target: the run's lease."""
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver, default=True))
    await jobs.put(TENANT, "nightly", JobSpec(retry=Retry(max_attempts=1)), "test")
    return await _die(jobs, clock, "nightly")


async def _promote(database: Database, clock: FrozenClock) -> None:
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            await sweeps.promote_due(conn, now=clock.now())


async def _deliveries(database: Database) -> list[tuple[str, str, dict[str, object]]]:
    found = []
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            rows = await conn.fetch(
                "SELECT state, idempotency_key, payload FROM runs WHERE job = $1", NOTIFY_JOB
            )
        found += [(r["state"], r["idempotency_key"], orjson.loads(r["payload"])) for r in rows]
    return found


def _verify(headers: dict[str, str], body: bytes) -> None:
    expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Tickwork-Signature"], f"sha256={expected}")


async def test_a_receiver_failing_for_two_minutes_gets_every_notification_after(
    database: Database, clock: FrozenClock, receiver: Receiver, poster: WebhookPoster
) -> None:
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver))
    spec = JobSpec(retry=Retry(max_attempts=1), pause_after_failures=2, notify=Notify(target="ops"))
    await jobs.put(TENANT, "nightly", spec, "test")
    await jobs.put(TENANT, "other", spec, "test")
    dead = [await _die(jobs, clock, "nightly"), await _die(jobs, clock, "nightly", "bang")]
    dead.append(await _die(jobs, clock, "other"))
    dispatcher = Dispatcher(database, clock, random.Random(7))
    deliveries = Deliveries(database, dispatcher, poster, environ=ENVIRON)

    receiver.failing = True
    start = clock.now()
    while (clock.now() - start).total_seconds() < 120:
        await deliveries.deliver_ready()
        clock.advance(5)
        await _promote(database, clock)
    assert receiver.refused >= 4 and not receiver.received
    assert {state for state, _, _ in await _deliveries(database)} <= {"ready", "retry_wait"}

    receiver.failing = False
    for _ in range(60):
        await deliveries.deliver_ready()
        if all(state == "succeeded" for state, _, _ in await _deliveries(database)):
            break
        clock.advance(60)
        await _promote(database, clock)
    # Three dead runs and the job paused by its second: four notifications, each once.
    runs = await _deliveries(database)
    assert len(runs) == 4 and all(state == "succeeded" for state, _, _ in runs)
    bodies = receiver.bodies()
    keys = {str(body["idempotencyKey"]) for body in bodies}
    expected = {f"notify/dead/{lease.run_id}" for lease in dead}
    expected.add(f"notify/autoPaused/{dead[1].run_id}")
    assert keys == expected
    for headers, body in receiver.received:
        _verify(headers, body)
        key = orjson.loads(body)["idempotencyKey"]
        assert headers["Idempotency-Key"] == headers["X-Tickwork-Delivery"] == key
    paused = next(body for body in bodies if body["event"] == "autoPaused")
    assert paused["job"] == "nightly" and paused["consecutiveDead"] == 2
    assert paused["error"] == {"message": "bang", "retryable": True, "attempt": 1}
    one = next(body for body in bodies if body["runId"] == dead[2].run_id)
    assert one["event"] == "dead" and one["job"] == "other" and one["target"] == "ops"
    # Every delivery is in the audit log of the job it is about.
    audited = []
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            rows = await conn.fetch("SELECT job, detail FROM audit_log WHERE action = 'notify'")
        audited += [orjson.loads(r["detail"])["idempotencyKey"] for r in rows]
    assert sorted(audited) == sorted(expected)


async def test_a_redelivered_notification_keeps_its_key(
    database: Database, clock: FrozenClock, receiver: Receiver, poster: WebhookPoster
) -> None:
    # The receiver took it but the answer was lost (here: the lease ran out first):
    # the next attempt carries the same key, so the receiver can drop the repeat.
    lease = await _nightly_died(database, clock, receiver)
    dispatcher = Dispatcher(database, clock, random.Random(7))
    [delivery] = await dispatcher.lease([NOTIFY_QUEUE], limit=5, worker_id="w", lease_seconds=30)
    clock.advance(60)
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            await sweeps.reap(conn, now=clock.now())
    await _promote(database, clock)
    clock.advance(600)
    await _promote(database, clock)
    deliveries = Deliveries(database, dispatcher, poster, environ=ENVIRON)
    assert await deliveries.deliver_ready() == 1
    [body] = receiver.bodies()
    assert body["idempotencyKey"] == f"notify/dead/{lease.run_id}" == delivery.idempotency_key
    assert delivery.idempotency_key is not None


async def test_nothing_is_sent_for_a_job_without_notify_and_no_default(
    database: Database, clock: FrozenClock, receiver: Receiver
) -> None:
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver))  # not the default
    await jobs.put(TENANT, "quiet", JobSpec(retry=Retry(max_attempts=1)), "test")
    await jobs.put(
        TENANT,
        "deaf",
        JobSpec(retry=Retry(max_attempts=1), notify=Notify(target="ops", on=[])),
        "test",
    )
    await _die(jobs, clock, "quiet")
    await _die(jobs, clock, "deaf")
    assert await _deliveries(database) == []


async def test_the_job_chooses_its_events(
    database: Database, clock: FrozenClock, receiver: Receiver
) -> None:
    jobs = Jobs(database, clock)
    await Targets(database, clock).put(TENANT, target(receiver))
    spec = JobSpec(
        retry=Retry(max_attempts=1),
        pause_after_failures=1,
        notify=Notify(target="ops", on=[NotifyEvent.auto_paused]),
    )
    await jobs.put(TENANT, "nightly", spec, "test")
    lease = await _die(jobs, clock, "nightly")
    [(_, key, payload)] = await _deliveries(database)
    assert key == f"notify/autoPaused/{lease.run_id}" and payload["event"] == "autoPaused"


async def test_a_dead_delivery_notifies_nobody(
    database: Database, clock: FrozenClock, receiver: Receiver, poster: WebhookPoster
) -> None:
    jobs = Jobs(database, clock)
    targets = Targets(database, clock)
    await targets.put(TENANT, target(receiver, default=True))
    await jobs.put(TENANT, "nightly", JobSpec(retry=Retry(max_attempts=1)), "test")
    await _die(jobs, clock, "nightly")
    # The target is gone: its delivery fails for good, and is dead.
    await targets.delete(TENANT, "ops")
    await targets.put(TENANT, target(receiver, "spare", default=True))
    dispatcher = Dispatcher(database, clock, random.Random(7))
    deliveries = Deliveries(database, dispatcher, poster, environ=ENVIRON)
    assert await deliveries.deliver_ready() == 1
    [(state, _, _)] = await _deliveries(database)
    assert state == "dead"
    assert receiver.received == []


async def test_a_missing_secret_fails_the_attempt_and_names_where_it_looked(
    database: Database, clock: FrozenClock, receiver: Receiver, poster: WebhookPoster
) -> None:
    await _nightly_died(database, clock, receiver)
    deliveries = Deliveries(database, Dispatcher(database, clock), poster, environ={})
    await deliveries.deliver_ready()
    assert receiver.received == []
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            row = await conn.fetchrow(
                "SELECT state, last_error FROM runs WHERE job = $1", NOTIFY_JOB
            )
        if row is not None:
            assert row["state"] == "retry_wait"
            error = orjson.loads(row["last_error"])["message"]
            assert "TICKWORK_TEST_HOOK_KEY is not set" in error and SECRET not in error


async def test_the_system_job_and_queue_are_reserved(
    database: Database, clock: FrozenClock
) -> None:
    jobs = Jobs(database, clock)
    with pytest.raises(InvalidRequest) as raised:
        await jobs.put(TENANT, NOTIFY_JOB, JobSpec(), "test")
    assert raised.value.field == "name"
    with pytest.raises(ValueError, match="reserved"):
        JobSpec.model_validate({"queue": NOTIFY_QUEUE})


async def test_one_default_target_per_tenant(
    database: Database, clock: FrozenClock, receiver: Receiver
) -> None:
    targets = Targets(database, clock)
    await targets.put(TENANT, target(receiver, "a", default=True))
    await targets.put(TENANT, target(receiver, "b", default=True))
    await targets.put("globex", target(receiver, "c", default=True))
    listed = {t.name: t.default for t in await targets.list(TENANT)}
    assert listed == {"a": False, "b": True}
    for shard in range(database.shard_count):
        async with database.connection(shard) as conn:
            count = await conn.fetchval(
                "SELECT count(*) FROM notification_targets WHERE is_default"
            )
        assert count == 2  # b and globex's c, on every shard


async def test_a_slack_target_gets_a_message_naming_the_run_and_its_key(
    database: Database, clock: FrozenClock, receiver: Receiver, poster: WebhookPoster
) -> None:
    jobs = Jobs(database, clock)
    slack = Target("chat", receiver.url, "slack", None, True, clock.now(), "test")
    await Targets(database, clock).put(TENANT, slack)
    await jobs.put(TENANT, "nightly", JobSpec(retry=Retry(max_attempts=1)), "test")
    lease = await _die(jobs, clock, "nightly", "disk full")
    deliveries = Deliveries(database, Dispatcher(database, clock), poster, environ={})
    assert await deliveries.deliver_ready() == 1
    [(headers, body)] = receiver.received
    [text] = orjson.loads(body).values()
    assert f"run {lease.run_id} of job acme/nightly is dead" in text
    assert "disk full" in text and f"notify/dead/{lease.run_id}" in text
    assert "X-Tickwork-Signature" not in headers  # no secretRef: not signed
