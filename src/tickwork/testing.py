"""Test a handler without a server: ``run_handler(handler, payload, attempt=2)``.

```python
from tickwork.testing import run_handler

def test_an_unknown_format_goes_to_the_dlq() -> None:
    result = run_handler(export_invoices, {"format": "xml"})
    assert result.failed and not result.retryable
```

It is part of the worker SDK (``tickwork.worker.testing``): what ``pip install
tickwork`` gives, with no server and no database.
"""

from tickwork.worker.context import InvalidPayload, NonRetryableError, RunContext, Snooze
from tickwork.worker.testing import HandlerResult, make_context, run_handler, run_handler_async

__all__ = [
    "HandlerResult",
    "InvalidPayload",
    "NonRetryableError",
    "RunContext",
    "Snooze",
    "make_context",
    "run_handler",
    "run_handler_async",
]
