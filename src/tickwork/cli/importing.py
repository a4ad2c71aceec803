"""``tickwork import``: CronJobs and crontabs as ScheduledJob YAML, without a server.

The mapping is ``core.importing``'s; this adapter reads the YAML or the crontab, prints
one ScheduledJob document per job on standard output (each after a comment naming its
source) and the report on standard error, one line per field. Exit status: 0 when
every input was imported, 1 when any was refused, 2 on a usage error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import click
import yaml

from tickwork.core import containers, importing, spec, zones
from tickwork.engine import manifests

# libyaml when the wheel has it: a cluster's `kubectl get cronjobs -A -o yaml` is large.
_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MAX_BYTES: Final = 64 * 1024 * 1024


class _Dumper(yaml.SafeDumper):
    """Block literals for text over several lines (a command's standard input), and a
    cron expression quoted, as the docs and kubectl users write it."""


class _Quoted(str):
    __slots__ = ()


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _quoted(dumper: yaml.SafeDumper, value: _Quoted) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style='"')


_Dumper.add_representer(str, _text)
_Dumper.add_representer(_Quoted, _quoted)


def _read(stream: IO[bytes], label: str) -> str:
    raw = stream.read(_MAX_BYTES + 1)
    if len(raw) > _MAX_BYTES:
        raise click.BadParameter(f"{label}: larger than {_MAX_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise click.BadParameter(f"{label}: not UTF-8 text: {error}") from None


def _label(stream: IO[bytes]) -> str:
    name = getattr(stream, "name", "-")
    return "-" if name in ("<stdin>", 0) or not isinstance(name, str) else name


def _emit(result: importing.Result) -> None:
    for job in result.jobs:
        schedule = job.spec.get("schedule")
        if isinstance(schedule, dict) and isinstance(schedule.get("cron"), str):
            schedule["cron"] = _Quoted(schedule["cron"])
        document = {
            "apiVersion": manifests.GROUP_VERSION,
            "kind": manifests.KIND,
            "metadata": job.metadata,
            "spec": job.spec,
        }
        text = yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=4096)
        comment = " ".join(job.origin.split())
        click.echo(f"---\n# {comment}\n{text}", nl=False)
    for line in result.lines():
        click.echo(line, err=True)
    imported, refused = len(result.jobs), result.refused
    summary = f"{imported} ScheduledJob{'' if imported == 1 else 's'}"
    click.echo(f"{summary}, {refused} refused" if refused else summary, err=True)
    if refused:
        sys.exit(1)


@click.group("import")
def import_() -> None:
    """Turn CronJobs and crontabs into ScheduledJobs.

    The ScheduledJob YAML goes to standard output, one document per job; standard
    error gets one line per field mapped, dropped or needing a decision. Exit status 1
    when an input was refused. See docs/migrating.md.
    """


@import_.command("cronjob")
@click.option(
    "-f",
    "--filename",
    "streams",
    type=click.File("rb"),
    multiple=True,
    required=True,
    metavar="FILE",
    help="CronJob manifests (a YAML stream, a List): batch/v1 or batch/v1beta1; - for "
    "standard input. Repeatable.",
)
def cronjob(streams: tuple[IO[bytes], ...]) -> None:
    """Print a ScheduledJob for each CronJob: the same schedule, zone, suspension,
    concurrency policy, deadline and Job template."""
    documents: list[Any] = []
    result = importing.Result()
    for stream in streams:
        label = _label(stream)
        try:
            documents.extend(yaml.load_all(_read(stream, label), Loader=_LOADER))
        except yaml.YAMLError as error:
            shown = " ".join(str(error).split())
            result.findings.append(
                importing.Finding(label, importing.Kind.refused, "", f"not YAML: {shown}")
            )
            result.refused += 1
    if not result.refused:
        result = importing.from_cronjobs(documents)
    _emit(result)


Callback = Callable[[click.Context, click.Parameter, str | None], str | None]


def _checked_by(check: Callable[[str], object], refusal: type[ValueError]) -> Callback:
    """An option's callback: the value as given, or click's refusal with the message of
    ``check``'s."""

    def callback(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            try:
                check(value)
            except refusal as error:
                raise click.BadParameter(str(error)) from None
        return value

    return callback


_zone = _checked_by(zones.get, zones.UnknownZone)
_queue = _checked_by(spec.check_queue, ValueError)
_namespace = _checked_by(spec.check_tenant, ValueError)


def _system_path(label: str) -> bool:
    """``/etc/crontab`` and the files of ``/etc/cron.d`` have a user field."""
    path = Path(label)
    return path.parent.name == "cron.d" or (path.name == "crontab" and path.parent.name == "etc")


@import_.command("crontab")
@click.argument("stream", metavar="FILE", type=click.File("rb"))
@click.option(
    "--tz",
    "zone",
    metavar="ZONE",
    callback=_zone,
    help="IANA zone the host ran cron in (default UTC); a CRON_TZ line of the file wins "
    "for the entries below it.",
)
@click.option(
    "--queue",
    metavar="QUEUE",
    callback=_queue,
    help="Queue of the jobs: default: default for handler jobs, containers (which "
    "job-runners serve) with --image.",
)
@click.option(
    "--image",
    metavar="IMAGE",
    help="Run each command in this image, by sh -c in a Job (container jobs); without it "
    "each entry becomes a handler job for a worker.",
)
@click.option(
    "--namespace",
    metavar="NS",
    callback=_namespace,
    help="Namespace of the ScheduledJobs (default: kubectl's).",
)
@click.option(
    "--system/--user",
    "system",
    default=None,
    help="Whether entries name a user before the command, as /etc/crontab and "
    "/etc/cron.d do (default: by the file's path).",
)
def crontab(
    stream: IO[bytes],
    zone: str | None,
    queue: str | None,
    image: str | None,
    namespace: str | None,
    system: bool | None,
) -> None:
    """Print a ScheduledJob for each entry of a crontab: a user's, or /etc/crontab with
    its user field. CRON_TZ, TZ and other variables, '%' in commands and @daily-style
    macros are read as cron reads them."""
    if image is not None and not image.strip():
        raise click.BadParameter("an image name", param_hint="'--image'")
    problem = containers.queue_problem(queue, image is not None) if queue is not None else None
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--queue'")
    label = _label(stream)
    text = _read(stream, label)
    options = importing.CrontabOptions(
        zone=zone,
        queue=queue,
        image=image,
        namespace=namespace,
        system=_system_path(label) if system is None else system,
    )
    _emit(importing.from_crontab(text, "crontab" if label == "-" else label, options))
