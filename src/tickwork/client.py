"""Enqueue, read and cancel runs from a Python application.

```python
from tickwork.client import Client

with Client.from_env() as tickwork:      # TICKWORK_URL, TICKWORK_TOKEN (or _FILE)
    run = tickwork.enqueue("export-invoices", {"month": "2026-03"}, delay=60)
```

``AsyncClient`` makes the same calls for asyncio. Every refusal of the API is raised as
the exception class of its problem type (``NotFound``, ``ConcurrencyLimit``,
``IdempotencyKeyReused``, ``QuotaExceeded``, ...), all ``ApiError``; no answer at all
is ``ApiUnreachable``. It is part of the worker SDK (``tickwork.worker.app_client``):
what ``pip install tickwork`` gives, with no server part.
"""

from tickwork.core.records import State
from tickwork.worker.app_client import (
    AsyncClient,
    Attempt,
    BatchResult,
    Client,
    Run,
    RunPage,
    RunRequest,
)
from tickwork.worker.credentials import Token, TokenFile
from tickwork.worker.problems import (
    PROBLEM_CLASSES,
    ApiError,
    ApiUnreachable,
    AuthUnavailable,
    ConcurrencyLimit,
    Forbidden,
    HeadersTooLarge,
    IdempotencyKeyReused,
    InvalidRequest,
    InvalidSchedule,
    InvalidState,
    ManagedByKubernetes,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PreconditionFailed,
    Problem,
    QuotaExceeded,
    RequestTimeout,
    ServerBusy,
    StaleLease,
    StoreUnavailable,
    TooManyAuthFailures,
    Unauthenticated,
)

__all__ = [
    "PROBLEM_CLASSES",
    "ApiError",
    "ApiUnreachable",
    "AsyncClient",
    "Attempt",
    "AuthUnavailable",
    "BatchResult",
    "Client",
    "ConcurrencyLimit",
    "Forbidden",
    "HeadersTooLarge",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "InvalidSchedule",
    "InvalidState",
    "ManagedByKubernetes",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PreconditionFailed",
    "Problem",
    "QuotaExceeded",
    "RequestTimeout",
    "Run",
    "RunPage",
    "RunRequest",
    "ServerBusy",
    "StaleLease",
    "State",
    "StoreUnavailable",
    "Token",
    "TokenFile",
    "TooManyAuthFailures",
    "Unauthenticated",
]
