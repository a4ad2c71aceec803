"""Unit tests of the handlers in ``examples/worker.py``: no server, no database.

    pytest examples/test_handlers.py

``run_handler`` gives each handler the context a worker would and reports what the
worker would send: succeeded, or failed with the message and whether it is retried.
"""

from __future__ import annotations

from worker import flaky_export, hello, poison_pill

from tickwork.testing import run_handler


def test_hello_succeeds_with_or_without_a_payload() -> None:
    assert run_handler(hello, {"greeting": "hi"}).succeeded
    assert run_handler(hello).succeeded


def test_the_first_export_attempt_fails_and_is_retried() -> None:
    result = run_handler(flaky_export, {"format": "csv"}, job="flaky-export", attempt=1)
    assert result.failed and result.retryable
    assert result.message == "ConnectionError: the export target did not answer"


def test_an_unknown_format_goes_to_the_dlq_at_once() -> None:
    result = run_handler(flaky_export, {"format": "xml"}, job="flaky-export")
    assert result.failed and not result.retryable
    assert result.message == "NonRetryableError: unknown format 'xml'"


def test_a_cancelled_export_stops_before_its_first_step() -> None:
    result = run_handler(flaky_export, {"format": "csv"}, attempt=2, cancel_requested=True)
    assert result.succeeded


def test_the_poison_pill_always_fails() -> None:
    for attempt in (1, 2, 3):
        assert run_handler(poison_pill, attempt=attempt).failed
