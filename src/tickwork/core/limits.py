"""Every limit of the public protocol, in one place.

The API, the worker SDK and the store read their bounds from here, and
``docs/http-api.md`` lists each constant with its value (a test keeps the two in step),
so a client knows what is refused before it is refused. A limit is part of the
contract: raising one is a compatible change, lowering one is not.
"""

from __future__ import annotations

from typing import Final

_KIB: Final = 1024
_MIB: Final = 1024 * _KIB

# --- the HTTP edge ---

MAX_BODY_BYTES: Final = 4 * _MIB
"""A request body larger than this is refused (413) before it is read whole."""

MAX_HEADER_BYTES: Final = 16 * _KIB
"""The request line and headers together; more is refused (431)."""

HEADER_READ_TIMEOUT_SECONDS: Final = 10.0
"""A client that has not sent its whole request head by then is answered 408."""

BODY_READ_TIMEOUT_SECONDS: Final = 30.0
"""A client that has not sent its whole body by then is answered 408."""

MAX_CONNECTIONS: Final = 2048
"""Concurrent connections one API process serves; more wait or are refused."""

# --- JSON ---

MAX_JSON_DEPTH: Final = 32
"""Arrays and objects nested in one client-given JSON value (a payload, an error
object): ``{"a": [1]}`` is 2 deep. Deeper values are refused naming the field."""

MAX_BODY_DEPTH: Final = MAX_JSON_DEPTH + 8
"""Nesting of a whole request body: its own fields plus a payload's ``MAX_JSON_DEPTH``."""

MAX_PAYLOAD_BYTES: Final = 256 * _KIB
"""A run's payload, encoded as JSON (413 payload-too-large past it)."""

MAX_ERROR_BYTES: Final = 64 * _KIB
"""The ``error`` object of a completion, encoded as JSON."""

MAX_MANIFEST_BYTES: Final = 1 * _MIB
"""One ScheduledJob manifest file (Kubernetes keeps objects under 1.5 MiB)."""

# --- names ---

MAX_NAME_LENGTH: Final = 253
"""A job name: a DNS-1123 subdomain, as a Kubernetes object name."""

MAX_TENANT_LENGTH: Final = 63
"""A tenant: a DNS-1123 label, as a Kubernetes namespace."""

MAX_QUEUE_LENGTH: Final = 63
"""A queue name."""

MAX_IDEMPOTENCY_KEY_LENGTH: Final = 256
"""An ``Idempotency-Key`` header or a batch item's ``idempotencyKey``, in characters."""

MAX_WORKER_ID_LENGTH: Final = 256
"""A lease request's ``workerId``, in characters."""

# --- schedules ---

MAX_CRON_LENGTH: Final = 256
"""A cron expression, in characters."""

MAX_JITTER_SECONDS: Final = 3600
"""``schedule.jitterSeconds`` (from 0)."""

MAX_DEADLINE_SECONDS: Final = 366 * 24 * 3600
"""``schedule.startingDeadlineSeconds`` (from 1)."""

MAX_LEASE_WATCH_SECONDS: Final = 7 * 24 * 3600
"""``notify.leasedLongerThanSeconds`` (from 1): a week."""

MAX_RUN_ALL_CATCH_UP: Final = 100
"""Missed fire times one ``run_all`` catch-up inserts; the rest are counted as dropped."""

# --- job specs ---

MAX_TIMEOUT_SECONDS: Final = 7 * 24 * 3600
"""``timeoutSeconds`` (from 1): one attempt's total run time."""

MAX_ATTEMPTS: Final = 100
"""``retry.maxAttempts`` (from 1)."""

MAX_RETRY_BASE_SECONDS: Final = 86_400
"""``retry.baseSeconds`` (from 0)."""

MAX_RETRY_MAX_SECONDS: Final = 7 * 86_400
"""``retry.maxSeconds`` (from 0, at least ``baseSeconds``)."""

MAX_CONCURRENCY: Final = 1_000_000
"""``concurrency`` (from 0 = unlimited)."""

RATE_ONLY_CONCURRENCY: Final = 2**31 - 1
"""The ``concurrency`` a run carries when its job has a rate limit and no concurrency
limit: on the claim's limited path, with no limit on leased runs."""

MAX_RATE_LIMIT: Final = 1_000_000
"""``rateLimit.limit`` (from 1): runs leased in one period."""

MAX_RATE_PERIOD_SECONDS: Final = 86_400
"""``rateLimit.periodSeconds`` (from 1)."""

MAX_FLOW_KEY_LENGTH: Final = 256
"""``rateLimit.key`` and ``concurrencyKey.key``: a JSON pointer into the payload."""

MAX_UNIQUE_FOR_SECONDS: Final = 30 * 86_400
"""``unique.forSeconds`` (from 1): how long a finished run still holds its key."""

MAX_DEBOUNCE_SECONDS: Final = 86_400
"""``debounce.seconds`` (from 1)."""

MAX_DEBOUNCE_MAX_SECONDS: Final = 7 * 86_400
"""``debounce.maxSeconds`` (from ``seconds``): the longest a burst delays its run."""

MAX_PAUSE_AFTER_FAILURES: Final = 1000
"""``pauseAfterFailures`` (from 1)."""

MAX_JOB_TEMPLATE_BYTES: Final = 256 * _KIB
"""``jobTemplate``, encoded as JSON (a container job's JobTemplateSpec)."""

# --- enqueue ---

MAX_ENQUEUE_BATCH: Final = 1000
"""Runs in one ``POST /v1/jobs/{name}/runs:batch``."""

MAX_DELAY_SECONDS: Final = 366 * 86_400
"""An enqueue's ``delaySeconds`` (from 0)."""

# --- the worker path ---

MAX_LEASE_BATCH: Final = 100
"""``max`` of one lease call (from 1)."""

MAX_LEASE_QUEUES: Final = 100
"""Queues named in one lease call (from 1)."""

MAX_HEARTBEAT_BATCH: Final = 100
"""Items of one ``POST /v1/runs:heartbeat``."""

MAX_COMPLETE_BATCH: Final = 100
"""Items of one ``POST /v1/runs:complete``."""

MIN_LEASE_SECONDS: Final = 1
"""``leaseSeconds`` of a lease and ``extendSeconds`` of a heartbeat, at least."""

MAX_LEASE_SECONDS: Final = 21_600
"""``leaseSeconds`` and ``extendSeconds``, at most (6 h)."""

DEFAULT_LEASE_SECONDS: Final = 30
"""``leaseSeconds`` and ``extendSeconds`` when not given."""

MAX_EXTENSION_SECONDS: Final = 6 * 3600
"""No single lease grant or extension reaches further than this past now."""

MAX_WAIT_SECONDS: Final = 20
"""``waitSeconds`` of a long-poll lease (from 0)."""

MAX_SNOOZE_SECONDS: Final = 7 * 86_400
"""``delaySeconds`` of a ``snoozed`` completion (from 0)."""

MAX_SNOOZES: Final = 1000
"""Snoozes of one run; past them a snooze counts as a failed attempt (``snooze-limit``)."""

# --- lists ---

DEFAULT_PAGE_SIZE: Final = 50
"""``limit`` of a list call when not given."""

MAX_PAGE_SIZE: Final = 500
"""``limit`` of a list call, at most (from 1)."""
