"""``tickwork schedule``: inspect cron schedules without a server."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

import click
from click.decorators import FC

from tickwork.core import cron, hashing, limits, spec
from tickwork.core.preview import Mark, fire_times

_MAX_COUNT: Final = 1000
# The marks a policy decides: a repeated local time, and a gap's times moved or left out.
# (An offset change between two ordinary fire times moves nothing.)
_POLICY_MARKS: Final = frozenset({Mark.gap, Mark.overlap})


def _parse_instant(text: str) -> datetime:
    # datetime.fromisoformat alone would also take dates, basic formats and naive times.
    if not spec.is_rfc3339(text):
        raise click.BadParameter(
            f"{text!r} is not an RFC 3339 instant (e.g. 2024-03-31T01:00:00Z)",
            param_hint="'--after'",
        )
    try:
        return datetime.fromisoformat(text.upper().replace(" ", "T")).astimezone(UTC)
    except ValueError as error:
        raise click.BadParameter(f"{text!r}: {error}", param_hint="'--after'") from None


def _parse_job(text: str) -> tuple[str, str]:
    tenant, separator, name = text.partition("/")
    if not separator or not tenant or not name or "/" in name:
        raise click.BadParameter(
            f"{text!r} is not TENANT/NAME (one '/', both parts non-empty)", param_hint="'--job'"
        )
    return tenant, name


def _utc_text(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _local_text(instant: datetime, schedule: cron.CronSchedule) -> str:
    local = instant.astimezone(schedule.tzinfo)
    return local.isoformat(sep=" ", timespec="seconds") + f" {local.tzname()}"


def _policy_text(schedule: cron.CronSchedule, given: cron.DstPolicy) -> str:
    kind = "a fixed-hour" if schedule.fixed_hour else "a wildcard-hour"
    parts = []
    for name, chosen, value in (
        ("repeated", given.repeated, schedule.dst.repeated),
        ("skipped", given.skipped, schedule.dst.skipped),
    ):
        default = "" if chosen is not None else f" (the default for {kind} schedule)"
        parts.append(f"{name} {value}{default}")
    return "DST policy: " + "; ".join(parts)


def _dst_option(flag: str, policy: type[enum.StrEnum], help: str) -> Callable[[FC], FC]:
    """A DST policy's option: one of its values, as ``schedule.dst`` takes them."""
    return click.option(flag, type=click.Choice([choice.value for choice in policy]), help=help)


@click.group()
def schedule() -> None:
    """Inspect schedules."""


@schedule.command()
@click.argument("cron_expression", metavar="CRON")
@click.option(
    "--tz",
    "zone",
    default="UTC",
    show_default=True,
    metavar="ZONE",
    help="IANA time zone the expression is read in.",
)
@click.option(
    "--after",
    "after_text",
    metavar="INSTANT",
    help="RFC 3339 instant to start after (default: now).",
)
@click.option(
    "--count",
    type=click.IntRange(1, _MAX_COUNT),
    default=5,
    show_default=True,
    help="How many fire times to show.",
)
@click.option(
    "--jitter-seconds",
    type=click.IntRange(0, limits.MAX_JITTER_SECONDS),
    help="Shift each time by the job's stable jitter offset (needs --job).",
)
@click.option("--job", "job_text", metavar="TENANT/NAME", help="Job whose jitter to apply.")
@_dst_option(
    "--dst-repeated",
    cron.DstRepeated,
    "A local time that happens twice fires at its first occurrence, its last, or both "
    "(schedule.dst.repeated; default: first for a fixed hour, both for an hour field "
    "starting with '*').",
)
@_dst_option(
    "--dst-skipped",
    cron.DstSkipped,
    "A local time that does not exist fires at the end of the gap (shift) or not at all "
    "(skip) (schedule.dst.skipped; default: shift for a fixed hour, skip for an hour field "
    "starting with '*').",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of UTC instants.")
def preview(
    cron_expression: str,
    zone: str,
    after_text: str | None,
    count: int,
    jitter_seconds: int | None,
    job_text: str | None,
    dst_repeated: str | None,
    dst_skipped: str | None,
    as_json: bool,
) -> None:
    """Print the next fire times of CRON, as UTC instants.

    CRON is five fields or a macro such as @daily. DST gaps and overlaps follow
    tickwork's rules, or the --dst-* choices: see docs/cron.md. A fire time that a gap
    or a repeated local time concerns says what happened to it.
    """
    policy = cron.DstPolicy(
        None if dst_repeated is None else cron.DstRepeated(dst_repeated),
        None if dst_skipped is None else cron.DstSkipped(dst_skipped),
    )
    try:
        parsed = cron.CronSchedule.parse(cron_expression, zone, policy)
    except cron.CronError as error:
        hint = "'--tz'" if error.field == "zone" else "'CRON'"
        raise click.BadParameter(str(error), param_hint=hint) from None

    if jitter_seconds is not None and job_text is None:
        raise click.UsageError("--jitter-seconds needs --job TENANT/NAME: the offset is per job")
    if job_text is not None and jitter_seconds is None:
        raise click.UsageError("--job only selects whose jitter to apply: add --jitter-seconds")
    offset = 0
    job_label = ""
    if job_text is not None and jitter_seconds is not None:
        tenant, name = _parse_job(job_text)
        offset = hashing.jitter_offset(tenant, name, jitter_seconds)
        job_label = hashing.job_key(tenant, name)

    # The command line is an adapter: reading the clock here keeps the engine pure.
    after = _parse_instant(after_text) if after_text is not None else datetime.now(UTC)
    shift = timedelta(seconds=offset)
    marked = fire_times(parsed, after, count)
    fires = [fire.instant + shift for fire in marked]

    if as_json:
        click.echo(json.dumps([_utc_text(fire) for fire in fires]))
        return
    if parsed.macro is not None:
        click.echo(f"{parsed.macro} runs as {parsed.expression}")
    if job_label:
        click.echo(f"jitter: +{offset}s for {job_label} (of up to {jitter_seconds}s)")
    if dst_repeated is not None or dst_skipped is not None:
        click.echo(_policy_text(parsed, policy))
    header = ("UTC", f"local ({parsed.zone})", "")
    rows = [
        (
            _utc_text(fire),
            _local_text(fire, parsed),
            f"DST {mark.mark}: {mark.note}" if mark.mark in _POLICY_MARKS else "",
        )
        for fire, mark in zip(fires, marked, strict=True)
    ]
    width = max(len(row[0]) for row in [header, *rows])
    local_width = max(len(row[1]) for row in [header, *rows])
    for left, middle, right in [header, *rows]:
        note = f"{' ' * (local_width - len(middle))}  {right}" if right else ""
        click.echo(f"{left:<{width}}  {middle}{note}")
    if not fires:
        click.echo("(no fire times left before year 10000)")
