"""``tickwork import``'s ScheduledJobs fire when their source fired (a Kubernetes
CronJob, read the way its controller's robfig/cron reads it; a crontab, the way cronie
reads it), except where docs/migrating.md says tickwork's DST rules differ; an API server
with the CRD and the admission webhook takes them; and a reader of docs/migrating.md can
walk through to ``kubectl get sj``. The samples and what they become field by field are
checked in tests/unit/test_import.py.

The sources' fire times are computed here, not by tickwork: croniter says which local
wall times match the expression, and two small models say which instants those become,
as the source ran them:

- ``every_minute``: each real minute, read in the zone, fires when it matches. That is
  robfig/cron's ``Next`` (the CronJob controller's) and cronie's for a ``CRON_TZ=``
  zone: a time in a spring-forward gap never comes, a repeated one comes twice.
- ``cronie_host``: cronie's main loop in the host's own zone (src/cron.c): a jump of
  the clock forward by up to three hours runs the fixed-time jobs of each skipped
  minute at once and the wildcard jobs (minute or hour field starting with ``*``) only
  for the current minute; a jump back runs only wildcard jobs until the clock catches
  up.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from click.testing import Result
from croniter import croniter
from kube import emulator, kubectl

# The operator in-process, as tests/scheduledjobs runs it (the worked example of
# docs/migrating.md goes through its webhook and status).
from scheduledjobs.conftest import (  # noqa: F401
    OperatorFactory,
    cluster,
    cluster_kube,
    jobs,
    observed,
    operator_for,
)
from unit.test_import import CRONJOBS, CRONTAB, SYSTEM_CRONTAB, documents, run, write

from tickwork.engine import manifests
from tickwork.operator import admission, crd

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------
# An API server with the CRD and the webhook takes them.


def imported() -> list[dict[str, Any]]:
    """Everything the samples give, as kubectl would send it."""
    found: list[dict[str, Any]] = []
    for result in (
        run("import", "cronjob", "-f", "-", stdin=CRONJOBS),
        run("import", "crontab", "-", "--tz", "Europe/Berlin", "--image", "r:2", stdin=CRONTAB),
        run("import", "crontab", "-", "--namespace", "team-a", stdin=CRONTAB),
        run("import", "crontab", "-", "--system", "--namespace", "ops", stdin=SYSTEM_CRONTAB),
    ):
        assert result.exit_code == 0, result.output
        found.extend(documents(result).values())
    return found


async def test_the_crd_and_the_webhook_take_every_imported_object(kube: emulator.Emulator) -> None:
    await kube.create(crd.definition())
    for namespace in ("billing", "team-a", "ops"):
        await kube.create_namespace(namespace)
    for document in imported():
        name = document["metadata"]["name"]
        assert admission.refusal("CREATE", document, None, manifests.parse_document) is None, name
        stored = await kube.create(document)
        # Nothing pruned (the Job template reaches the runner as it was written); the
        # server only adds its defaults.
        assert stored["spec"].get("jobTemplate") == document["spec"].get("jobTemplate"), name
        assert within(document["spec"], stored["spec"]), name


def within(part: Any, whole: Any) -> bool:
    """Whether every field of ``part`` is in ``whole`` with the same value."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(
            key in whole and within(value, whole[key]) for key, value in part.items()
        )
    return bool(part == whole)


# ---------------------------------------------------------------------------------------
# They fire when their sources fired: the samples' fire times around four clock changes,
# minute by minute, against tickwork's preview.


MINUTE = timedelta(minutes=1)
EPOCH = datetime(1970, 1, 1)


def matching_walls(
    expression: str, zone: ZoneInfo, after: datetime, until: datetime
) -> set[datetime]:
    """The local wall times, naive, that croniter says ``expression`` names, from a day
    before ``after`` to a day after ``until``."""
    start = after.astimezone(zone).replace(tzinfo=None) - timedelta(days=1)
    end = until.astimezone(zone).replace(tzinfo=None) + timedelta(days=1)
    found: set[datetime] = set()
    times = croniter(expression, start, day_or=True)
    while (wall := times.get_next(datetime)) <= end:
        found.add(wall)
    return found


def real_minutes(after: datetime, until: datetime) -> Iterator[datetime]:
    moment = after
    while moment < until:
        moment += MINUTE
        yield moment


def every_minute(
    expression: str, zone_name: str, after: datetime, until: datetime
) -> list[datetime]:
    """robfig/cron (the CronJob controller) and cronie under CRON_TZ: each real minute,
    read in the zone, that matches."""
    zone = ZoneInfo(zone_name)
    walls = matching_walls(expression, zone, after, until)
    return [
        t for t in real_minutes(after, until) if t.astimezone(zone).replace(tzinfo=None) in walls
    ]


def cronie_host(
    expression: str, zone_name: str, after: datetime, until: datetime
) -> list[datetime]:
    """cronie's main loop (cron.c) on a host whose clock is in ``zone_name``: the minute
    it starts each job at."""
    zone = ZoneInfo(zone_name)
    walls = matching_walls(expression, zone, after, until)
    if expression.startswith("@"):
        wildcard = expression == "@hourly"  # entry.c sets HR_STAR for @hourly alone
    else:
        minute, hour = expression.split()[:2]
        wildcard = minute.startswith("*") or hour.startswith("*")  # MIN_STAR | HR_STAR

    def clock(moment: datetime) -> int:  # local wall time in minutes since the epoch
        offset = moment.astimezone(zone).utcoffset()
        assert offset is not None
        return int((moment.timestamp() + offset.total_seconds()) // 60)

    started: list[datetime] = []
    virtual = clock(after)

    def find_jobs(moment: datetime, minute: int, wild: bool, fixed: bool) -> None:
        if EPOCH + minute * MINUTE in walls and (wild if wildcard else fixed):
            started.append(moment)

    for moment in real_minutes(after, until):
        running = clock(moment)
        difference = running - virtual
        if difference == 1 or abs(difference) > 180:
            virtual = running
            find_jobs(moment, running, True, True)
        elif difference > 5:  # "DST begins": wildcard jobs now, each skipped minute's fixed
            find_jobs(moment, running, True, False)
            while virtual < running:
                virtual += 1
                find_jobs(moment, virtual, False, True)
        elif difference > 0:
            while virtual < running:
                virtual += 1
                find_jobs(moment, virtual, True, True)
        else:  # "DST ends": wildcard jobs only, until the clock catches up
            find_jobs(moment, running, True, False)
    return started


def preview(cron: str, zone: str, after: datetime, until: datetime) -> list[datetime]:
    result = run(
        "schedule",
        "preview",
        cron,
        "--tz",
        zone,
        "--after",
        after.isoformat(),
        "--count",
        "1000",
        "--json",
    )
    assert result.exit_code == 0, result.output
    fires = [
        datetime.fromisoformat(text.replace("Z", "+00:00"))
        for text in yaml.safe_load(result.output)
    ]
    assert fires[-1] > until, "--count too small for the window"
    return [fire for fire in fires if fire <= until]


@dataclass(frozen=True)
class Night:
    zone: str
    day: str  # the local date the clocks change

    def window(self) -> tuple[datetime, datetime]:
        midnight = datetime.fromisoformat(self.day).replace(tzinfo=UTC)
        return midnight - timedelta(hours=24), midnight + timedelta(hours=36)


BERLIN_SPRING = Night("Europe/Berlin", "2026-03-29")  # 02:00 CET → 03:00 CEST (01:00Z)
BERLIN_FALL = Night("Europe/Berlin", "2026-10-25")  # 03:00 CEST → 02:00 CET (01:00Z)
NEW_YORK_SPRING = Night("America/New_York", "2026-03-08")  # 02:00 EST → 03:00 EDT (07:00Z)
NEW_YORK_FALL = Night("America/New_York", "2026-11-01")  # 02:00 EDT → 01:00 EST (06:00Z)


def z(*times: str) -> list[str]:
    return list(times)


# (source, night): (fired only by the source, fired only by tickwork), as the DST tables
# of docs/migrating.md say. Every other fire time is the same.
CASES = {
    # A CronJob (robfig/cron): a fixed time in the gap never comes, one in the repeated
    # hour comes twice; tickwork runs it once, at the end of the gap / the first time.
    ("cronjob billing/nightly-backup", BERLIN_SPRING): (z(), z("2026-03-29T01:00:00Z")),
    ("cronjob billing/nightly-backup", BERLIN_FALL): (z("2026-10-25T01:30:00Z"), z()),
    ("cronjob team-a/ny-report", NEW_YORK_SPRING): (z(), z()),
    ("cronjob team-a/ny-report", NEW_YORK_FALL): (z("2026-11-01T06:30:00Z"), z()),
    ("cronjob cleanup", BERLIN_SPRING): (z(), z()),
    ("cronjob team-a/half-hourly", BERLIN_SPRING): (z(), z("2026-03-29T01:00:00Z")),
    (
        "cronjob team-a/half-hourly",
        BERLIN_FALL,
    ): (z("2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z"), z()),
    # cronie in the host's zone: tickwork's rules, but for a wildcard *minute* in a fixed
    # hour (cronie keeps real-time cadence for it) and several times in one gap (cronie
    # runs each, at once).
    ("crontab:8", BERLIN_SPRING): (z(), z()),
    ("crontab:8", BERLIN_FALL): (z(), z()),
    ("crontab:9", BERLIN_SPRING): (z("2026-03-29T01:00:00Z"), z()),
    ("crontab:9", BERLIN_FALL): (z(), z()),
    ("crontab:10", BERLIN_SPRING): (z(), z("2026-03-29T01:00:00Z")),
    (
        "crontab:10",
        BERLIN_FALL,
    ): (
        z(
            "2026-10-25T01:00:00Z",
            "2026-10-25T01:15:00Z",
            "2026-10-25T01:30:00Z",
            "2026-10-25T01:45:00Z",
        ),
        z(),
    ),
    ("crontab:11", BERLIN_SPRING): (z(), z()),
    ("crontab:11", BERLIN_FALL): (z(), z()),
    ("crontab:12", BERLIN_SPRING): (z(), z()),
    ("crontab:13", BERLIN_FALL): (z(), z()),
    # cronie under CRON_TZ: as a CronJob.
    ("crontab:16", NEW_YORK_SPRING): (z(), z()),
    ("crontab:16", NEW_YORK_FALL): (z("2026-11-01T06:30:00Z"), z()),
    ("crontab:17", NEW_YORK_FALL): (z(), z()),
}


def sources() -> dict[str, tuple[str, str, Any]]:
    """source → (expression as the source wrote it, the zone it ran in, its model)."""
    first, *others = yaml.safe_load_all(CRONJOBS)
    cronjobs = first["items"] + others[:3]
    found: dict[str, tuple[str, str, Any]] = {}
    for cronjob in cronjobs:
        meta, spec = cronjob["metadata"], cronjob["spec"]
        name = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        prefixed = re.fullmatch(r"(?:CRON_)?TZ=(\S+) (.*)", spec["schedule"])
        zone, expression = (
            prefixed.groups() if prefixed else (spec.get("timeZone", "UTC"), spec["schedule"])
        )
        found[f"cronjob {name}"] = (expression, zone, every_minute)
    zone, model = "Europe/Berlin", cronie_host  # --tz: the host's own zone
    for number, line in enumerate(CRONTAB.splitlines(), start=1):
        if line.startswith("CRON_TZ="):
            zone, model = line.removeprefix("CRON_TZ="), every_minute
        elif line[:1] in "0123456789*@-":
            fields = line.lstrip("-").split()
            expression = fields[0] if line.startswith("@") else " ".join(fields[:5])
            found[f"crontab:{number}"] = (expression, zone, model)
    return found


@pytest.mark.parametrize(
    ("source", "night"), sorted(CASES, key=str), ids=lambda v: str(getattr(v, "day", v))
)
def test_preview_fires_when_the_source_did_but_where_the_docs_say(
    source: str, night: Night
) -> None:
    expression, zone, model = sources()[source]
    schedule = origins()[source]["spec"]["schedule"]
    assert schedule["timeZone"] == zone
    after, until = night.window()
    ours = preview(schedule["cron"], schedule["timeZone"], after, until)
    theirs = model(expression, zone, after, until)
    assert theirs
    only_theirs = sorted((Counter(theirs) - Counter(ours)).elements())
    only_ours = sorted((Counter(ours) - Counter(theirs)).elements())
    expected = CASES[(source, night)]
    shown = (
        [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in only_theirs],
        [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in only_ours],
    )
    assert shown == expected


@functools.cache
def origins() -> dict[str, dict[str, Any]]:
    """The ScheduledJobs the samples give, by the source each comment names."""
    return dict(_named(run("import", "cronjob", "-f", "-", stdin=CRONJOBS))) | dict(
        _named(run("import", "crontab", "-", "--tz", "Europe/Berlin", stdin=CRONTAB))
    )


def _named(result: Result) -> Iterator[tuple[str, dict[str, Any]]]:
    """(source, ScheduledJob) from the comment before each document."""
    assert result.exit_code == 0, result.output
    for chunk in result.stdout.split("---\n")[1:]:
        comment = chunk.splitlines()[0].removeprefix("# ")
        yield comment.split(": ")[0], yaml.safe_load(chunk)


# ---------------------------------------------------------------------------------------
# docs/migrating.md's worked example, run as written: its inputs, its commands, the
# output it shows.

MIGRATING = ROOT / "docs" / "migrating.md"


@dataclass(frozen=True)
class Fenced:
    lang: str
    text: str


def worked_example() -> list[Fenced]:
    """The fenced blocks of the section "A worked example", in order."""
    section = MIGRATING.read_text("utf-8").split("\n## A worked example\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return [
        Fenced(lang, text)
        for lang, text in re.findall(r"^```(\w*)\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    ]


def sessions(text: str) -> Iterator[tuple[str, str]]:
    """(command, the output shown) of a console block."""
    for chunk in text.split("$ ")[1:]:
        command, _, shown = chunk.partition("\n")
        yield command, shown.rstrip("\n")


def columns(text: str) -> list[dict[str, str]]:
    """kubectl's table, cut where the header's words start (a cron has spaces)."""
    header, *rows = text.rstrip("\n").splitlines()
    names = header.split()
    starts = [header.index(name) for name in names]
    ends = [*starts[1:], None]
    return [
        {name: row[a:b].strip() for name, a, b in zip(names, starts, ends, strict=True)}
        for row in rows
    ]


@kubectl.needed
async def test_the_worked_example_of_docs_migrating_walks_through_to_kubectl_get_sj(
    cluster_kube: emulator.Emulator,  # noqa: F811 - the fixture imported above
    operator_for: OperatorFactory,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the example's file names, and so its report, are relative
    example = worked_example()
    [cronjob] = [b.text for b in example if b.lang == "yaml" and "kind: CronJob" in b.text]
    [crontab] = [b.text for b in example if b.lang == "crontab"]
    write(tmp_path, "nightly-backup.yaml", cronjob)
    write(tmp_path, "reports.crontab", crontab)
    await cluster_kube.create_namespace("billing")
    written: list[str] = []
    ran = []
    async with operator_for(namespaces=("billing",)):
        for block in example:
            if block.lang == "yaml" and "kind: ScheduledJob" in block.text:
                assert block.text in written, f"the docs show\n{block.text}\nnot one of\n{written}"
            if block.lang != "console":
                continue
            for command, shown in sessions(block.text):
                words = shlex.split(command)
                ran.append(words[:2])
                if words[0] == "tickwork":
                    redirect = words.index(">")
                    result = run(*words[1:redirect])
                    assert result.exit_code == 0, result.output
                    write(tmp_path, words[redirect + 1], result.stdout)
                    written.append(result.stdout)
                    assert result.stderr.rstrip("\n") == shown
                elif words[1] == "apply":
                    out = await kubectl.run(cluster_kube, "apply", "--validate=false", *words[2:])
                    assert out.rstrip("\n") == shown
                else:
                    assert words[1:3] == ["get", "sj"]
                    for name in ("nightly-backup", "send-daily-finance"):
                        await cluster_kube.wait_for("sj", name, observed(1), namespace="billing")
                    out = await kubectl.run(cluster_kube, *words[1:])
                    got, expected = columns(out), columns(shown)
                    for row in (*got, *expected):
                        row.pop("AGE")
                    assert got == expected, out
    assert ran == [
        ["tickwork", "import"],
        ["tickwork", "import"],
        ["kubectl", "apply"],
        ["kubectl", "get"],
    ]
