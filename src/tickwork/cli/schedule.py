"""``tickwork schedule``: inspect cron schedules without a server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Final

import click

from tickwork.core import cron, hashing, limits, spec

_MAX_COUNT: Final = 1000


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
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of UTC instants.")
def preview(
    cron_expression: str,
    zone: str,
    after_text: str | None,
    count: int,
    jitter_seconds: int | None,
    job_text: str | None,
    as_json: bool,
) -> None:
    """Print the next fire times of CRON, as UTC instants.

    CRON is five fields or a macro such as @daily. DST gaps and overlaps follow
    tickwork's rules: see docs/cron.md.
    """
    try:
        parsed = cron.CronSchedule.parse(cron_expression, zone)
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
    fires = [nominal + shift for nominal in parsed.preview(after, count)]

    if as_json:
        click.echo(json.dumps([_utc_text(fire) for fire in fires]))
        return
    if parsed.macro is not None:
        click.echo(f"{parsed.macro} runs as {parsed.expression}")
    if job_label:
        click.echo(f"jitter: +{offset}s for {job_label} (of up to {jitter_seconds}s)")
    header = ("UTC", f"local ({parsed.zone})")
    rows = [(_utc_text(fire), _local_text(fire, parsed)) for fire in fires]
    width = max(len(row[0]) for row in [header, *rows])
    for left, right in [header, *rows]:
        click.echo(f"{left:<{width}}  {right}")
    if not fires:
        click.echo("(no fire times left before year 10000)")
