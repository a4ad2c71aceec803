"""The job specification: defaults, camelCase documents, and refusals naming the field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from tickwork.core import cron, limits, spec
from tickwork.core.spec import JobSpec, MissedRunPolicy, Priority, Retry, Schedule


def refusal(document: dict[str, Any]) -> tuple[str, tuple[int | str, ...], str]:
    """``(type, location, message)`` of the single error ``document`` is refused with."""
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(document)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return errors[0]["type"], tuple(errors[0]["loc"]), errors[0]["msg"]


def test_an_empty_spec_is_an_api_only_job_with_documented_defaults() -> None:
    job = JobSpec()
    assert job.schedule is None and job.run_at is None
    assert job.queue == "default"
    assert job.priority is Priority.default
    assert job.timeout_seconds == 3600
    assert job.retry == Retry(max_attempts=3, base_seconds=30, max_seconds=1800)
    assert job.concurrency == 0
    assert job.paused is False
    assert job.payload is None


def test_schedule_defaults() -> None:
    schedule = JobSpec.model_validate({"schedule": {"cron": "0 2 * * *"}}).schedule
    assert schedule is not None
    assert schedule.time_zone == "UTC"
    assert schedule.jitter_seconds == 60
    assert schedule.missed_run_policy is MissedRunPolicy.run_once
    assert schedule.starting_deadline_seconds is None


def test_document_is_camel_case_and_round_trips() -> None:
    document = {
        "schedule": {
            "cron": "30 2 * * *",
            "timeZone": "Europe/Berlin",
            "jitterSeconds": 0,
            "missedRunPolicy": "run_all",
            "startingDeadlineSeconds": 600,
        },
        "queue": "billing",
        "priority": "critical",
        "timeoutSeconds": 120,
        "retry": {"maxAttempts": 5, "baseSeconds": 2.0, "maxSeconds": 60.0},
        "concurrency": 1,
        "overlapPolicy": "Forbid",
        "paused": True,
        "dryRun": True,
        "payload": {"invoice": [1, 2, 3], "dry": False},
    }
    job = JobSpec.model_validate(document)
    assert job.to_document() == document
    assert JobSpec.model_validate(job.to_document()) == job


def test_snake_case_names_are_accepted_too() -> None:
    job = JobSpec.model_validate({"timeout_seconds": 5, "retry": {"max_attempts": 1}})
    assert job.timeout_seconds == 5
    assert job.retry.max_attempts == 1


def test_run_at_job_document() -> None:
    job = JobSpec.model_validate({"runAt": "2026-03-15T02:00:00+01:00"})
    assert job.run_at == datetime(2026, 3, 15, 1, 0, tzinfo=UTC)
    assert JobSpec.model_validate(job.to_document()) == job


def test_schedule_and_run_at_together_are_refused() -> None:
    kind, _, message = refusal({"schedule": {"cron": "0 2 * * *"}, "runAt": "2026-01-01T00:00:00Z"})
    assert kind == "schedule_conflict"
    assert "schedule" in message and "runAt" in message


@pytest.mark.parametrize(
    ("expression", "hint"),
    [
        ("61 * * * *", "minute"),
        ("0 24 * * *", "hour"),
        ("0 0 32 * *", "day"),
        ("0 0 * 13 *", "month"),
        ("0 0 * * 8", "week"),
        ("0 0 * *", "5"),
        ("0 0 30 2 *", "never"),
        ("every day", ""),
    ],
)
def test_invalid_cron_is_refused_naming_the_schedule(expression: str, hint: str) -> None:
    kind, location, message = refusal({"schedule": {"cron": expression}})
    assert kind == "invalid_schedule"
    assert location == ("schedule", "cron")
    assert expression.split()[0] in message or expression in message
    assert hint in message


def test_unknown_zone_is_refused() -> None:
    kind, location, message = refusal(
        {"schedule": {"cron": "0 2 * * *", "timeZone": "Mars/Olympus"}}
    )
    assert (kind, location) == ("invalid_schedule", ("schedule", "timeZone"))
    assert "Mars/Olympus" in message


def test_spec_validation_agrees_with_the_cron_parser() -> None:
    with pytest.raises(cron.CronError):
        cron.CronSchedule.parse("0 0 31 4 *", "UTC")
    assert refusal({"schedule": {"cron": "0 0 31 4 *"}})[0] == "invalid_schedule"
    schedule = Schedule(cron="0 9-17 * * 1-5", time_zone="Europe/Berlin")
    assert schedule.compile() == cron.CronSchedule.parse("0 9-17 * * 1-5", "Europe/Berlin")


@pytest.mark.parametrize("jitter", [-1, 3601])
def test_jitter_outside_0_to_3600_is_refused(jitter: int) -> None:
    _, location, _ = refusal({"schedule": {"cron": "0 2 * * *", "jitterSeconds": jitter}})
    assert location == ("schedule", "jitterSeconds")


@pytest.mark.parametrize("jitter", [0, 3600])
def test_jitter_bounds_are_inclusive(jitter: int) -> None:
    job = JobSpec.model_validate({"schedule": {"cron": "0 2 * * *", "jitterSeconds": jitter}})
    assert job.schedule is not None and job.schedule.jitter_seconds == jitter


def test_unknown_priority_is_refused() -> None:
    kind, location, message = refusal({"priority": "urgent"})
    assert kind == "enum"
    assert location == ("priority",)
    assert "critical" in message


def test_unknown_missed_run_policy_is_refused() -> None:
    _, location, _ = refusal({"schedule": {"cron": "0 2 * * *", "missedRunPolicy": "all"}})
    assert location == ("schedule", "missedRunPolicy")


def test_payload_of_exactly_256_kib_is_accepted_one_byte_more_is_refused() -> None:
    limit = limits.MAX_PAYLOAD_BYTES
    assert limit == 256 * 1024
    at_limit = "x" * (limit - 2)  # the two quotes make it exactly 256 KiB encoded
    assert JobSpec(payload=at_limit).payload == at_limit
    kind, location, message = refusal({"payload": at_limit + "x"})
    assert (kind, location) == ("payload_too_large", ("payload",))
    assert str(limit + 1) in message and str(limit) in message


def test_payload_size_counts_encoded_utf8_bytes() -> None:
    assert spec.payload_size({"a": "é"}) == len('{"a":"é"}'.encode())
    kind, _, _ = refusal({"payload": {"text": "€" * 90_000}})  # 270 000 bytes encoded
    assert kind == "payload_too_large"


@pytest.mark.parametrize(
    ("document", "location"),
    [
        ({"retry": {"maxAttempts": 0}}, ("retry", "maxAttempts")),
        ({"retry": {"maxAttempts": 101}}, ("retry", "maxAttempts")),
        ({"retry": {"baseSeconds": -1}}, ("retry", "baseSeconds")),
        ({"retry": {"baseSeconds": 100, "maxSeconds": 10}}, ("retry",)),
        ({"timeoutSeconds": 0}, ("timeoutSeconds",)),
        ({"timeoutSeconds": 7 * 24 * 3600 + 1}, ("timeoutSeconds",)),
        ({"concurrency": -1}, ("concurrency",)),
        ({"pauseAfterFailures": 0}, ("pauseAfterFailures",)),
        ({"pauseAfterFailures": 1001}, ("pauseAfterFailures",)),
        ({"pauseAfterFailures": True}, ("pauseAfterFailures",)),
        ({"queue": "Bad Queue"}, ("queue",)),
        ({"queue": ""}, ("queue",)),
        ({"queue": "-leading"}, ("queue",)),
        ({"runAt": "2026-01-01T00:00:00"}, ("runAt",)),
        (
            {"schedule": {"cron": "0 2 * * *", "startingDeadlineSeconds": 0}},
            ("schedule", "startingDeadlineSeconds"),
        ),
        ({"schedules": {"cron": "0 2 * * *"}}, ("schedules",)),
        ({"schedule": {"cron": "0 2 * * *", "timezone": "UTC"}}, ("schedule", "timezone")),
    ],
)
def test_invalid_fields_are_refused_by_name(
    document: dict[str, Any], location: tuple[str, ...]
) -> None:
    assert refusal(document)[1] == location


def test_retry_max_below_base_names_both_fields() -> None:
    _, _, message = refusal({"retry": {"baseSeconds": 100, "maxSeconds": 10}})
    assert "maxSeconds" in message and "baseSeconds" in message


def test_specs_are_immutable() -> None:
    job = JobSpec()
    with pytest.raises(ValidationError):
        job.queue = "other"  # type: ignore[misc]


def test_priority_ranks_serve_critical_first() -> None:
    assert [p.rank for p in (Priority.critical, Priority.default, Priority.bulk)] == [0, 1, 2]
    for priority in Priority:
        assert Priority.from_rank(priority.rank) is priority


@pytest.mark.parametrize("tenant", ["acme", "a", "team-42", "a" * 63])
def test_valid_tenants(tenant: str) -> None:
    spec.check_tenant(tenant)


@pytest.mark.parametrize("tenant", ["", "Acme", "-acme", "acme-", "a.b", "a" * 64, "ünï"])
def test_invalid_tenants(tenant: str) -> None:
    with pytest.raises(ValueError, match="tenant"):
        spec.check_tenant(tenant)


@pytest.mark.parametrize(
    "name", ["export-invoices", "a.b.c", "x", "a" * 253, "0-a.b-0", "a." + "b" * 251]
)
def test_valid_job_names(name: str) -> None:
    spec.check_name(name)


@pytest.mark.parametrize("name", ["", "Export", "a_b", ".a", "a.", "a" * 254, "a/b"])
def test_invalid_job_names(name: str) -> None:
    with pytest.raises(ValueError, match="job name"):
        spec.check_name(name)


# Each dot-separated label starts and ends with a letter or digit, as Kubernetes
# requires of an object name: none of these could be a ScheduledJob's.
@pytest.mark.parametrize("name", ["a..b", "a.-b", "a-.b", "a.b..c"])
def test_a_name_whose_labels_do_not_start_and_end_alphanumeric_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="job name"):
        spec.check_name(name)
