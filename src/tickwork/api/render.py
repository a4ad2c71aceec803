"""Resources as the JSON the contract shows: camelCase, RFC 3339 UTC instants.

Rendering builds plain dicts for orjson; stored payloads are embedded as the JSON text
the database holds (``orjson.Fragment``), never parsed on the way out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import orjson
from pydantic.alias_generators import to_camel

from tickwork.core import records, shards
from tickwork.core.errors import TickworkError
from tickwork.core.records import (
    Attempt,
    AuditEntry,
    Completed,
    Definition,
    Extended,
    Lease,
    ReadyRuns,
    Run,
    State,
)
from tickwork.core.spec import Priority
from tickwork.engine.jobs import JobView

JSON_OPTIONS: Final = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def dumps(document: Any) -> bytes:
    return orjson.dumps(document, option=JSON_OPTIONS)


def _payload(payload_json: str | None) -> Any:
    return None if payload_json is None else orjson.Fragment(payload_json)


def problem(error: TickworkError) -> dict[str, Any]:
    document: dict[str, Any] = {
        "type": error.type,
        "title": error.title,
        "status": error.status,
        "detail": error.detail,
    }
    if error.field is not None:
        document["field"] = error.field
    return document


def _placed(item: Run | Lease) -> dict[str, Any]:
    """The fields a run and a lease begin with: which run, and where it waits."""
    return {
        "runId": item.run_id,
        "job": item.job,
        "tenant": item.tenant,
        "queue": item.queue,
        "priority": Priority.from_rank(item.priority).value,
    }


def run(item: Run) -> dict[str, Any]:
    return {
        **_placed(item),
        "state": item.state.value,
        "attempt": item.attempt,
        "maxAttempts": item.max_attempts,
        "dueAt": item.due_at,
        "readyAt": item.ready_at,
        "idempotencyKey": item.effective_idempotency_key,
        "payload": _payload(item.payload_json),
        "lastError": item.last_error,
        "cancelRequested": item.cancel_requested,
        "createdAt": item.created_at,
        "finishedAt": item.finished_at,
        **_answered_by(item),
    }


def _answered_by(item: Run) -> dict[str, bool]:
    """What an enqueue answered with an existing run says of it (nothing otherwise)."""
    if item.answered_by == "unique":
        return {"deduplicated": True}
    if item.answered_by == "debounce":
        return {"debounced": True}
    return {}


def ready_runs(batch: ReadyRuns) -> bytes:
    """The answer to a plain batch, ``{"items": [...]}`` with ``run`` of each run, as
    JSON text: the fields every run shares rendered once by orjson, each run's id, key
    and payload (the JSON text it was stored from) spliced in between."""
    at = batch.created_at
    shared = dumps(
        {
            "job": batch.job,
            "tenant": batch.tenant,
            "queue": batch.queue,
            "priority": Priority.from_rank(batch.priority).value,
            "state": State.ready.value,
            "attempt": 0,
            "maxAttempts": batch.max_attempts,
            "dueAt": at,
            "readyAt": at,
        }
    )[1:-1]
    ending = dumps(
        {"lastError": None, "cancelRequested": False, "createdAt": at, "finishedAt": None}
    )[1:-1]
    # The key is "<tenant>/<job>#<runId>": its start encoded once, without its closing
    # quote; a run id (shards.format_run_id: "r<shard>-<id>") needs no escaping.
    key_start = dumps(f"{batch.tenant}/{batch.job}#")[:-1]
    head = b'{"runId":"r%d-' % batch.shard
    middle = b'",' + shared + b',"idempotencyKey":' + key_start + b"r%d-" % batch.shard
    tail = b"," + ending + b"}"
    documents = [
        b'%s%d%s%d","payload":%s%s'
        % (head, local, middle, local, b"null" if text is None else text, tail)
        for local, text in zip(batch.ids, batch.payloads_json, strict=True)
    ]
    return b'{"items":[' + b",".join(documents) + b"]}"


def wire(item: object, *names: str, **renamed: str) -> dict[str, Any]:
    """The attributes ``names`` of ``item`` under the names the models give them on the
    wire (camelCase, as their alias generator does), and ``renamed``'s wire names from
    the attributes they name."""
    document = {to_camel(name): getattr(item, name) for name in names}
    for wire_name, name in renamed.items():
        document[wire_name] = getattr(item, name)
    return document


def attempt(item: Attempt) -> dict[str, Any]:
    return wire(item, "attempt", "worker_id", "leased_at", "finished_at", "outcome", "error")


def run_with_attempts(item: Run, attempts: list[Attempt]) -> dict[str, Any]:
    document = run(item)
    document["attempts"] = [attempt(a) for a in attempts]
    return document


def _earliest(*instants: datetime | None) -> datetime | None:
    known = [i for i in instants if i is not None]
    return min(known) if known else None


def job(view: JobView) -> dict[str, Any]:
    definition, summary = view.definition, view.summary
    last = summary.last_run
    return {
        "name": definition.name,
        "tenant": definition.tenant,
        "spec": definition.spec.to_document(),
        "paused": definition.paused,
        "pausedReason": paused_reason(definition),
        "consecutiveDeadRuns": definition.consecutive_dead,
        "nextRunAt": _earliest(summary.next_scheduled, definition.next_due_at),
        "lastRun": None
        if last is None
        else {
            "runId": last.run_id,
            "state": last.state.value,
            "dueAt": last.due_at,
            "finishedAt": last.finished_at,
        },
        "activeRuns": summary.active,
        "deadRuns": summary.dead,
        "missedRunsDropped": definition.missed_dropped,
        "overlapSkipped": definition.overlap_skipped,
        "shard": definition.shard,
        "managedBy": None if definition.managed_by is None else definition.managed_by.value,
        "createdAt": definition.created_at,
        "updatedAt": definition.updated_at,
    }


def paused_reason(definition: Definition) -> dict[str, Any] | None:
    """Why tickwork keeps the job paused (pauseAfterFailures); None when it does not."""
    reason = definition.paused_reason
    if not definition.paused or reason is None:
        return None
    return {
        "consecutiveDeadRuns": reason.consecutive_dead,
        "lastRunId": shards.format_run_id(definition.shard, reason.run_id),
        "lastError": reason.error,
        "pausedAt": reason.at,
        "message": reason.message(definition.shard),
    }


# A priority's name by its rank, read once per leased run.
_PRIORITY_NAMES: Final = tuple(Priority.from_rank(rank).value for rank in range(len(Priority)))


def lease(item: Lease) -> dict[str, Any]:
    # Once per leased run: one dict written out, the run id made once (``_placed`` and
    # the key's property would build a dict more and the id twice).
    run_id = item.run_id
    return {
        "runId": run_id,
        "job": item.job,
        "tenant": item.tenant,
        "queue": item.queue,
        "priority": _PRIORITY_NAMES[item.priority],
        "attempt": item.attempt,
        "idempotencyKey": records.effective_idempotency_key(
            item.idempotency_key, item.tenant, item.job, run_id
        ),
        "fencingToken": item.fencing_token,
        "dueAt": item.due_at,
        "leaseExpiresAt": item.lease_expires_at,
        "deadline": item.deadline,
        "dryRun": item.dry_run,
        "payload": _payload(item.payload_json),
    }


def extended(item: Extended) -> dict[str, Any]:
    return {"leaseExpiresAt": item.lease_expires_at, "cancelRequested": item.cancel_requested}


def completed(item: Completed) -> dict[str, Any]:
    document: dict[str, Any] = {"state": item.state.value}
    if item.next_attempt_at is not None:
        document["nextAttemptAt"] = item.next_attempt_at
    return document


def audit_entry(item: AuditEntry) -> dict[str, Any]:
    return wire(item, "at", "job", "action", "actor", "detail", runId="public_run_id")
