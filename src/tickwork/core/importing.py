"""Schedules kept elsewhere, as ScheduledJobs: Kubernetes CronJobs and crontab lines.

Pure: documents come in parsed and go out as dictionaries (``tickwork import`` reads and
writes the YAML). Every field read is accounted for by a ``Finding``, one line of the
report: mapped, set (a value the source does not write but its behaviour implies),
dropped (with the reason), needing a decision, or refused. A job is only emitted when
it passes the checks the admission webhook makes (the JobSpec, the name and the
namespace), so what ``tickwork import`` prints, ``kubectl apply`` takes.

What changes on the way, and why, is ``docs/migrating.md``: the wording of the findings
and that page go together.
"""

from __future__ import annotations

import copy
import enum
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from tickwork.core import containers, credentials, cron, limits, zones
from tickwork.core import spec as spec_module

__all__ = [
    "CONTAINER_NAME",
    "ENV_SECRET",
    "STDIN_VARIABLE",
    "CrontabOptions",
    "Finding",
    "Imported",
    "Kind",
    "Result",
    "from_cronjobs",
    "from_crontab",
]

# The Job a CronJob starts gets the CronJob's name plus 11 characters, within the 63 of
# a label value; an imported crontab line's name keeps to the same bound.
MAX_NAME: Final = 52
CONTAINER_NAME: Final = "command"
# A crontab command's standard input (after '%') reaches a container job through this
# variable, piped into the command by the shell.
STDIN_VARIABLE: Final = "CRON_STDIN"
# What an imported crontab line's secret-looking variables are taken from instead.
ENV_SECRET: Final = "crontab-env"  # noqa: S105 - the name of a Secret, not one

# Kubernetes' own defaults for a CronJob's Job.
_BACKOFF_LIMIT: Final = 6
# A pod's restarts back off from 10 s, doubling, to 6 min (the Job controller).
_POD_BACKOFF: Final = (10, 360)
_CONCURRENCY: Final = ("Allow", "Forbid", "Replace")
_CRONJOB_VERSIONS: Final = ("batch/v1", "batch/v1beta1")
_LIST_KINDS: Final = ("List", "CronJobList")
_CRONJOB_FIELDS: Final = frozenset(
    {
        "schedule",
        "timeZone",
        "startingDeadlineSeconds",
        "concurrencyPolicy",
        "suspend",
        "jobTemplate",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    }
)
_SERVER_METADATA: Final = frozenset(
    {
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    }
)
# Labels and annotations the tool that applied the CronJob writes for itself.
_TOOL_PREFIXES: Final = (
    "kubectl.kubernetes.io/",
    "meta.helm.sh/",
    "helm.sh/",
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
)
_TOOL_KEYS: Final = frozenset({"app.kubernetes.io/managed-by"})
# robfig/cron's zone prefix, which CronJobs took before Kubernetes 1.29 refused it.
_ZONE_PREFIX: Final = re.compile(r"(CRON_TZ|TZ)=(\S*)[ \t]+(.*)", re.DOTALL)

# cronie's load_env, as a pattern: a name (quoted or not), '=', a value (quoted, or the
# rest of the line without its trailing blanks).
_ENVIRONMENT: Final = re.compile(
    r"""(?:'(?P<sq>[^'=]*)'|"(?P<dq>[^"=]*)"|(?P<name>[^\s='"][^\s=]*))[ \t]*=[ \t]*"""
    r"""(?:'(?P<svalue>[^']*)'[ \t]*|"(?P<dvalue>[^"]*)"[ \t]*|(?P<value>[^\s'"].*?)[ \t]*)"""
)
_ENTRY: Final = re.compile(r"(\S+)[ \t]+(\S+)[ \t]+(\S+)[ \t]+(\S+)[ \t]+(\S+)[ \t]+(.*)")
_WORD: Final = re.compile(r"(\S+)[ \t]*(.*)", re.DOTALL)
_MAIL: Final = frozenset({"MAILTO", "MAILFROM", "CONTENT_TYPE", "CONTENT_TRANSFER_ENCODING"})


class Kind(enum.StrEnum):
    mapped = "mapped"
    set = "set"
    dropped = "dropped"
    decision = "decision"
    refused = "refused"


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of the report: ``source`` (``cronjob billing/backup``,
    ``crontab:12``) says where, ``field`` what, ``text`` the rest."""

    source: str
    kind: Kind
    field: str
    text: str

    def line(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else f"{self.source}:"
        if self.kind is Kind.mapped:
            return f"{where} → {self.text}"
        if self.kind is Kind.set:
            return f"{where} set to {self.text}"
        if self.kind is Kind.dropped:
            return f"{where} dropped ({self.text})"
        if self.kind is Kind.decision:
            return f"{where} needs a decision: {self.text}"
        return f"{self.source}: refused: {self.field + ': ' if self.field else ''}{self.text}"


@dataclass(frozen=True, slots=True)
class Imported:
    """One ScheduledJob: its ``metadata`` and ``spec``, and where it comes from."""

    origin: str  # a comment for the output: the CronJob, or the crontab line
    metadata: dict[str, Any]
    spec: dict[str, Any]


@dataclass(slots=True)
class Result:
    jobs: list[Imported] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    refused: int = 0

    def lines(self) -> list[str]:
        return [finding.line() for finding in self.findings]


class _Refused(Exception):
    def __init__(self, field: str, text: str) -> None:
        super().__init__(text)
        self.field = field
        self.text = text


class _Report:
    """The findings of one source (one CronJob, one crontab line)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.findings: list[Finding] = []

    def add(self, kind: Kind, field: str, text: str) -> None:
        self.findings.append(Finding(self.source, kind, field, text))

    def mapped(self, field: str, text: str) -> None:
        self.add(Kind.mapped, field, text)

    def set(self, field: str, text: str) -> None:
        self.add(Kind.set, field, text)

    def dropped(self, field: str, text: str) -> None:
        self.add(Kind.dropped, field, text)

    def decision(self, field: str, text: str) -> None:
        self.add(Kind.decision, field, text)

    def accept(self, result: Result, job: Imported) -> None:
        """The source imported: its findings, and its job."""
        result.findings.extend(self.findings)
        result.jobs.append(job)

    def refuse(self, result: Result, refused: _Refused) -> None:
        """The source left out: its findings, then why."""
        result.findings.extend(self.findings)
        result.findings.append(Finding(self.source, Kind.refused, refused.field, refused.text))
        result.refused += 1


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return spec_module.shown(text)


def _check(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
    """What the admission webhook checks: the name, the namespace and the JobSpec."""
    for where, check, value in (
        ("metadata.name", spec_module.check_name, metadata["name"]),
        ("metadata.namespace", spec_module.check_tenant, metadata.get("namespace", "default")),
    ):
        try:
            check(value)
        except ValueError as error:
            raise _Refused(where, str(error)) from None
    try:
        spec_module.parse(spec_module.JobSpec, spec)
    except ValidationError as error:
        first = error.errors()[0]
        named = spec_module.error_field(first)
        raise _Refused(
            "spec" if named is None else f"spec.{named}", spec_module.error_message(first)
        ) from None


# ---------------------------------------------------------------------------------------
# CronJobs


def _documents(documents: Iterable[Any]) -> Iterator[tuple[Any, str | None]]:
    """Each document, Lists opened; with the apiVersion a CronJobList gives its items."""
    for document in documents:
        if isinstance(document, dict) and document.get("kind") in _LIST_KINDS:
            items = document.get("items") or []
            inherited = document.get("apiVersion") if document["kind"] == "CronJobList" else None
            for item in items if isinstance(items, list) else []:
                yield item, inherited
        elif document is not None:
            yield document, None


def from_cronjobs(documents: Iterable[Any]) -> Result:
    """ScheduledJobs for the CronJobs among ``documents`` (parsed YAML: a stream, Lists
    and CronJobLists opened); other kinds are skipped, each with a line."""
    result = Result()
    seen: set[tuple[str, Any]] = set()
    cronjobs = 0
    for position, (document, inherited) in enumerate(_documents(documents), start=1):
        if not isinstance(document, dict):
            result.findings.append(
                Finding(f"document {position}", Kind.dropped, "", "not a Kubernetes object")
            )
            continue
        kind = document.get("kind", "CronJob" if inherited else None)
        if kind != "CronJob":
            shown = kind if isinstance(kind, str) else "no kind"
            result.findings.append(
                Finding(f"document {position}", Kind.dropped, "", f"{shown}, not a CronJob")
            )
            continue
        cronjobs += 1
        metadata = document.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
        key = (namespace if isinstance(namespace, str) else "", name)
        if isinstance(name, str) and isinstance(namespace, str):
            source = f"cronjob {namespace}/{name}"
        else:
            source = f"cronjob {name}" if isinstance(name, str) else f"cronjob #{position}"
        report = _Report(source)
        try:
            if isinstance(name, str) and key in seen:
                raise _Refused("metadata.name", "a CronJob of this name came earlier in the input")
            imported = _cronjob(document, inherited, report)
            _check(imported.metadata, imported.spec)
        except _Refused as refused:
            report.refuse(result, refused)
            continue
        seen.add(key)
        report.accept(result, imported)
    if cronjobs == 0:
        result.findings.append(Finding("input", Kind.refused, "", "no CronJob in it"))
        result.refused += 1
    return result


def _cronjob(document: Mapping[str, Any], inherited: str | None, report: _Report) -> Imported:
    version = document.get("apiVersion", inherited)
    if version not in _CRONJOB_VERSIONS:
        raise _Refused(
            "apiVersion", f"{_shown(version)}: tickwork reads batch/v1 and batch/v1beta1 CronJobs"
        )
    metadata = _metadata(document.get("metadata"), report)
    for key in document:
        if key == "status":
            report.dropped(
                "status",
                "written by the CronJob controller; the operator writes the ScheduledJob's",
            )
        elif key not in ("apiVersion", "kind", "metadata", "spec"):
            report.dropped(key, "not a field of a CronJob")
    source_spec = document.get("spec")
    if not isinstance(source_spec, dict):
        raise _Refused("spec", "missing, or not a mapping")
    spec: dict[str, Any] = {"schedule": _schedule(source_spec, report)}

    policy = source_spec.get("concurrencyPolicy")
    if policy is None:
        report.mapped("spec.concurrencyPolicy", "spec.overlapPolicy Allow (Kubernetes' default)")
        policy = "Allow"
    elif policy in _CONCURRENCY:
        report.mapped("spec.concurrencyPolicy", f"spec.overlapPolicy {policy}")
    else:
        raise _Refused(
            "spec.concurrencyPolicy", f"{_shown(policy)} is not Allow, Forbid or Replace"
        )
    spec["overlapPolicy"] = policy

    suspend = source_spec.get("suspend")
    if suspend is not None:
        if not isinstance(suspend, bool):
            raise _Refused("spec.suspend", f"{_shown(suspend)} is not true or false")
        report.mapped("spec.suspend", "spec.paused")
        spec["paused"] = suspend

    for limit in ("successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        if limit in source_spec:
            report.dropped(f"spec.{limit}", "tickwork keeps run history itself")
    for key in source_spec:
        if key not in _CRONJOB_FIELDS:
            report.dropped(f"spec.{key}", "not a field of a CronJob that tickwork knows")

    template = source_spec.get("jobTemplate")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise _Refused("spec.jobTemplate", "missing, or without a spec")
    spec["queue"] = containers.QUEUE
    report.set("spec.queue", f"{containers.QUEUE} (the queue `tickwork job-runner` serves)")
    spec.update(_job_template(template, report))
    return Imported(report.source, metadata, _ordered(spec))


def _metadata(source: Any, report: _Report) -> dict[str, Any]:
    if not isinstance(source, dict) or not isinstance(source.get("name"), str):
        raise _Refused("metadata.name", "missing")
    metadata: dict[str, Any] = {"name": source["name"]}
    report.mapped("metadata.name", "metadata.name")
    if source.get("namespace") is not None:
        if not isinstance(source["namespace"], str):
            raise _Refused("metadata.namespace", "not a string")
        metadata["namespace"] = source["namespace"]
        report.mapped("metadata.namespace", "metadata.namespace")
    for key, value in source.items():
        if key in ("name", "namespace"):
            continue
        if key in ("labels", "annotations") and isinstance(value, dict):
            kept = _kept(f"metadata.{key}", value, report)
            if kept:
                metadata[key] = kept
                report.mapped(f"metadata.{key}", f"metadata.{key} ({len(kept)} kept)")
        elif key in _SERVER_METADATA:
            report.dropped(f"metadata.{key}", "set by the API server")
        elif key == "ownerReferences":
            report.decision(
                f"metadata.{key}",
                "dropped: the CronJob's owners do not own the ScheduledJob; add them back if "
                "they should",
            )
        elif key == "finalizers":
            report.dropped(f"metadata.{key}", "their controllers watch CronJobs")
        else:
            report.dropped(f"metadata.{key}", "not copied to the ScheduledJob")
    return metadata


def _kept(where: str, values: Mapping[str, Any], report: _Report) -> dict[str, Any]:
    kept = {}
    for key, value in values.items():
        if key in _TOOL_KEYS or key.startswith(_TOOL_PREFIXES):
            report.dropped(
                f"{where}[{key}]",
                "written by the tool that applied the CronJob, which writes its own",
            )
        else:
            kept[key] = value
    return kept


def _schedule(source: Mapping[str, Any], report: _Report) -> dict[str, Any]:
    expression = source.get("schedule")
    if not isinstance(expression, str):
        raise _Refused("spec.schedule", "missing, or not a string")
    zone_field = "spec.timeZone"
    zone = source.get("timeZone")
    if zone is not None and not isinstance(zone, str):
        raise _Refused(zone_field, f"{_shown(zone)} is not a string")
    prefixed = _ZONE_PREFIX.fullmatch(expression)
    if prefixed is not None:
        variable, named, expression = prefixed.groups()
        if zone is not None and zone != named:
            raise _Refused(
                "spec.schedule",
                f"{variable}={named} in the schedule and timeZone {zone} disagree",
            )
        report.mapped(
            "spec.schedule",
            f"spec.schedule.timeZone {named}: its {variable}= prefix (Kubernetes refuses "
            "a zone in the schedule since 1.29)",
        )
        zone, zone_field = named, "spec.schedule"
    elif zone is not None:
        report.mapped("spec.timeZone", f"spec.schedule.timeZone {zone}")
    else:
        report.decision(
            "spec.timeZone",
            "absent: read as UTC. Kubernetes read the schedule in kube-controller-manager's "
            "zone, UTC on most clusters: set spec.schedule.timeZone if yours ran in another",
        )
        zone = "UTC"
    written = " ".join(expression.split())
    expression = _robfig(written)
    try:
        cron.validate(expression, zone)
    except cron.CronError as error:
        where = zone_field if error.field == "zone" else "spec.schedule"
        raise _Refused(where, str(error)) from None
    if expression != written:
        report.mapped(
            "spec.schedule",
            f"spec.schedule.cron {expression}: {written} as robfig/cron reads it ('?' is '*', "
            "'N/S' is 'N-last/S')",
        )
    else:
        report.mapped("spec.schedule", f"spec.schedule.cron {expression}")
    schedule: dict[str, Any] = {"cron": expression, "timeZone": zone, "jitterSeconds": 0}
    report.set(
        "spec.schedule.jitterSeconds",
        "0 (a CronJob starts at the exact minute; tickwork's default spreads starts over 60 s)",
    )
    deadline = source.get("startingDeadlineSeconds")
    if deadline is not None:
        if not isinstance(deadline, int) or isinstance(deadline, bool) or deadline < 0:
            raise _Refused("spec.startingDeadlineSeconds", f"{_shown(deadline)} is not a number")
        bounded = min(max(deadline, 1), limits.MAX_DEADLINE_SECONDS)
        target = f"spec.schedule.startingDeadlineSeconds {bounded}"
        if bounded != deadline:
            report.decision(
                "spec.startingDeadlineSeconds",
                f"{deadline} is outside tickwork's 1-{limits.MAX_DEADLINE_SECONDS}: {target}",
            )
        else:
            report.mapped("spec.startingDeadlineSeconds", target)
        schedule["startingDeadlineSeconds"] = bounded
    return schedule


# robfig/cron's last value of each field (its day of week ends at 6, Saturday).
_ROBFIG_LAST: Final = (59, 23, 31, 12, 6)
_ROBFIG_STEP: Final = re.compile(r"([0-9]+|[A-Za-z]+)/([0-9]+)")


def _robfig(expression: str) -> str:
    """``expression`` with what robfig/cron (the CronJob controller's parser) takes and
    tickwork writes otherwise: ``?`` for ``*`` in the day fields, and a step from a
    single value (``5/15``), which runs to the field's last value."""
    fields = expression.split(" ")
    if len(fields) != 5:
        return expression
    rewritten = []
    for index, text in enumerate(fields):
        items = []
        for item in text.split(","):
            step = _ROBFIG_STEP.fullmatch(item)
            if item == "?" and index in (2, 4):
                item = "*"
            elif step is not None:
                item = f"{step.group(1)}-{_ROBFIG_LAST[index]}/{step.group(2)}"
            items.append(item)
        rewritten.append(",".join(items))
    return " ".join(rewritten)


def _job_template(source: Mapping[str, Any], report: _Report) -> dict[str, Any]:
    template = copy.deepcopy(dict(source))
    job = template["spec"]
    spec: dict[str, Any] = {}
    for key in list(template):
        if key not in ("metadata", "spec"):
            report.dropped(f"spec.jobTemplate.{key}", "not a field of a JobTemplateSpec")
            del template[key]
    metadata = template.get("metadata")
    if isinstance(metadata, dict):
        for key in list(metadata):
            if key not in ("labels", "annotations"):
                # `kubectl get -o yaml` writes creationTimestamp: null here.
                report.dropped(
                    f"spec.jobTemplate.metadata.{key}", "a Job takes only labels and annotations"
                )
                del metadata[key]
        if not metadata:
            del template["metadata"]

    limit = job.pop("backoffLimit", None)
    if limit is None:
        attempts = _BACKOFF_LIMIT + 1
        report.mapped(
            "spec.jobTemplate.spec.backoffLimit",
            f"spec.retry.maxAttempts {attempts}: absent, Kubernetes' default "
            f"{_BACKOFF_LIMIT} retries",
        )
    elif isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        attempts = min(limit + 1, limits.MAX_ATTEMPTS)
        text = f"spec.retry.maxAttempts {attempts} (tickwork retries; the Job gets backoffLimit: 0)"
        if attempts != limit + 1:
            report.decision(
                "spec.jobTemplate.spec.backoffLimit",
                f"{limit} retries are more than tickwork's {limits.MAX_ATTEMPTS} attempts: {text}",
            )
        else:
            report.mapped("spec.jobTemplate.spec.backoffLimit", text)
    else:
        raise _Refused("spec.jobTemplate.spec.backoffLimit", f"{_shown(limit)} is not a number")
    retry: dict[str, Any] = {"maxAttempts": attempts}
    if attempts > 1:
        base, most = _POD_BACKOFF
        retry |= {"baseSeconds": base, "maxSeconds": most}
        report.set(
            "spec.retry",
            f"baseSeconds {base}, maxSeconds {most} (Kubernetes retried a pod after 10 s, "
            "doubling up to 6 min; tickwork waits a random time up to that)",
        )
    spec["retry"] = retry

    deadline = job.pop("activeDeadlineSeconds", None)
    if deadline is None:
        spec["timeoutSeconds"] = limits.MAX_TIMEOUT_SECONDS
        report.decision(
            "spec.jobTemplate.spec.activeDeadlineSeconds",
            f"absent: the Job had no deadline, and tickwork needs one: spec.timeoutSeconds "
            f"{limits.MAX_TIMEOUT_SECONDS} (7 days, the most it takes); lower it",
        )
    elif isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 1:
        spec["timeoutSeconds"] = min(deadline, limits.MAX_TIMEOUT_SECONDS)
        text = f"spec.timeoutSeconds {spec['timeoutSeconds']}"
        if deadline > limits.MAX_TIMEOUT_SECONDS:
            report.decision(
                "spec.jobTemplate.spec.activeDeadlineSeconds",
                f"{deadline} is more than tickwork's {limits.MAX_TIMEOUT_SECONDS}: {text}",
            )
        else:
            report.mapped("spec.jobTemplate.spec.activeDeadlineSeconds", text)
    else:
        raise _Refused(
            "spec.jobTemplate.spec.activeDeadlineSeconds", f"{_shown(deadline)} is not a number"
        )

    pod_template = job.get("template")
    pod = pod_template.get("spec") if isinstance(pod_template, dict) else None
    if isinstance(pod, dict) and pod.get("restartPolicy") == "OnFailure":
        report.decision(
            "spec.jobTemplate.spec.template.spec.restartPolicy",
            "OnFailure kept: under the Job's backoffLimit: 0 the first container restart "
            "fails the attempt, and tickwork retries it as a new Job; Never says so",
        )
    report.mapped(
        "spec.jobTemplate", "spec.jobTemplate (its pod template and other fields as they were)"
    )
    spec["jobTemplate"] = template
    return spec


# ---------------------------------------------------------------------------------------
# Crontabs


@dataclass(frozen=True, slots=True)
class CrontabOptions:
    """``tickwork import crontab``'s choices: the zone the host ran in (None: UTC unless
    the file says), the queue of handler jobs, the image of container jobs (None: handler
    jobs), the namespace, and whether lines carry a user field (``/etc/crontab``)."""

    zone: str | None = None
    queue: str | None = None
    image: str | None = None
    namespace: str | None = None
    system: bool = False


@dataclass(slots=True)
class _Environment:
    """What the lines above a crontab entry set, as cron hands it to the entry."""

    variables: dict[str, tuple[str, int]] = field(default_factory=dict)  # value, line

    def get(self, name: str) -> tuple[str, int] | None:
        return self.variables.get(name)


def from_crontab(text: str, where: str, options: CrontabOptions) -> Result:
    """A ScheduledJob for every entry of a crontab (``where`` names it in the report)."""
    result = Result()
    environment = _Environment()
    names: set[str] = set()
    entries = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        stripped = line.strip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        source = f"{where}:{number}"
        assigned = _assignment(stripped)
        if assigned is not None:
            result.findings.extend(_variable(source, *assigned, number, environment))
            continue
        entries += 1
        report = _Report(source)
        try:
            imported = _entry(stripped, report, environment, options, names)
            _check(imported.metadata, imported.spec)
        except _Refused as refused:
            report.refuse(result, refused)
            continue
        report.accept(result, imported)
    if entries == 0:
        result.findings.append(Finding(where, Kind.refused, "", "no crontab entry in it"))
        result.refused += 1
    return result


def _assignment(line: str) -> tuple[str, str] | None:
    matched = _ENVIRONMENT.fullmatch(line)
    if matched is None:
        return None
    name = next(g for g in (matched["sq"], matched["dq"], matched["name"]) if g is not None)
    value = next(
        (g for g in (matched["svalue"], matched["dvalue"], matched["value"]) if g is not None), ""
    )
    return name, value


def _variable(
    source: str, name: str, value: str, number: int, environment: _Environment
) -> list[Finding]:
    report = _Report(source)
    if name in _MAIL:
        report.dropped(
            name,
            "tickwork mails nothing: a failed run's error is in `tickwork runs list`, the "
            "dashboard and a RunDead Event",
        )
        return report.findings
    if name == "CRON_TZ":
        try:
            zones.get(value)
        except zones.UnknownZone as error:
            report.add(Kind.refused, name, str(error))
            return report.findings
        report.mapped(name, "spec.schedule.timeZone of the entries below")
    elif name == "TZ":
        report.mapped(name, "the commands' environment, and their zone unless CRON_TZ or --tz says")
    elif name == "RANDOM_DELAY":
        if not value.isdigit():
            report.dropped(name, f"{_shown(value)} is not a number of minutes")
            return report.findings
        report.mapped(
            name,
            "spec.schedule.jitterSeconds of the entries below (cronie draws a delay at each "
            "start; tickwork's offset is fixed per job)",
        )
    elif name == "SHELL":
        report.mapped(name, "the shell that runs the commands below")
    elif _secret(name, value):
        report.decision(
            name,
            f"its value is not copied: container jobs read it from the Secret {ENV_SECRET} "
            f"(create it with the key {name}), handler jobs' workers from their own secrets",
        )
    else:
        report.mapped(name, "the environment of the commands below")
    environment.variables[name] = (value, number)
    return report.findings


def _entry(
    line: str,
    report: _Report,
    environment: _Environment,
    options: CrontabOptions,
    names: set[str],
) -> Imported:
    text = line
    if text.startswith("-"):
        # cronie: run without logging the command to syslog.
        report.dropped("-", "cronie's switch that keeps the command out of syslog")
        text = text[1:]
    if text.startswith("@"):
        word = _WORD.fullmatch(text)
        assert word is not None  # a non-blank line
        expression, rest = word.groups()
    else:
        entry = _ENTRY.fullmatch(text)
        if entry is None:
            raise _Refused("", "expected five time fields and a command")
        expression = " ".join(entry.groups()[:5])
        rest = entry.group(6)
    user = None
    if options.system:
        word = _WORD.fullmatch(rest)
        if word is None or not word.group(2):
            raise _Refused("", "expected a user and a command after the time fields")
        user, rest = word.groups()
    if not rest.strip(" \t"):
        raise _Refused("", "no command")
    command, stdin = _split_input(rest)

    zone, zone_note, zone_kind = _zone(environment, options)
    try:
        cron.validate(expression, zone)
    except cron.CronError as error:
        raise _Refused("schedule", str(error)) from None
    report.mapped("schedule", f"spec.schedule.cron {expression}")
    report.add(zone_kind, "zone", f"spec.schedule.timeZone {zone} {zone_note}".rstrip())

    schedule: dict[str, Any] = {"cron": expression, "timeZone": zone}
    delay = environment.get("RANDOM_DELAY")
    if delay is not None and delay[0].isdigit():
        schedule["jitterSeconds"] = min(int(delay[0]) * 60, limits.MAX_JITTER_SECONDS)
        report.mapped(
            "RANDOM_DELAY",
            f"spec.schedule.jitterSeconds {schedule['jitterSeconds']} (line {delay[1]})",
        )
    else:
        schedule["jitterSeconds"] = 0
        report.set(
            "spec.schedule.jitterSeconds",
            "0 (cron starts at the exact minute; tickwork's default spreads starts over 60 s)",
        )

    name = _unique(_command_name(command), names)
    report.mapped("command", f"metadata.name {name}")
    metadata: dict[str, Any] = {"name": name}
    if options.namespace is not None:
        metadata["namespace"] = options.namespace

    spec: dict[str, Any] = {"schedule": schedule, "overlapPolicy": "Allow"}
    report.set("spec.overlapPolicy", "Allow (cron starts a command while the last one runs)")
    if re.search(r"(?:^|[\s;&|(])flock[ \t]", command):
        report.decision(
            "command",
            "it takes a lock with flock, which only works on one host: overlapPolicy Forbid "
            "skips a start while the last run goes on",
        )
    spec["timeoutSeconds"] = limits.MAX_TIMEOUT_SECONDS
    report.decision(
        "spec.timeoutSeconds",
        f"{limits.MAX_TIMEOUT_SECONDS} (7 days, the most it takes): cron puts no bound on a "
        "command, tickwork needs one; lower it",
    )
    spec["retry"] = {"maxAttempts": 1}
    report.set(
        "spec.retry.maxAttempts", "1 (cron does not retry a failed command; raise it for retries)"
    )

    variables = {
        key: value
        for key, (value, _) in environment.variables.items()
        if key not in ("CRON_TZ", "RANDOM_DELAY", "SHELL")
    }
    shell = environment.get("SHELL")
    if options.image is not None:
        spec["jobTemplate"] = _container_job(
            command, stdin, variables, shell[0] if shell else "/bin/sh", options.image, report
        )
        spec["queue"] = options.queue or containers.QUEUE
        if options.queue is None:
            report.set("spec.queue", f"{containers.QUEUE} (the queue `tickwork job-runner` serves)")
        if user is not None:
            report.decision(
                "user",
                f"{user} ran it: set the container's securityContext.runAsUser to its uid",
            )
    else:
        spec.update(_handler_job(command, stdin, variables, shell, name, options, report))
        if user is not None:
            report.decision("user", f"{user} ran it; the worker runs it as its own user")
    return Imported(f"{report.source}: {line}", metadata, _ordered(spec))


_ORDER: Final = (
    "schedule",
    "queue",
    "overlapPolicy",
    "paused",
    "timeoutSeconds",
    "retry",
    "payload",
    "jobTemplate",
)


def _ordered(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's fields in the order a person reads them: when, where, how, what."""
    return {key: spec[key] for key in sorted(spec, key=_ORDER.index)}


def _secret(name: str, value: str) -> bool:
    """Whether a crontab variable holds a secret: by its name (the payload scanner's
    keys, and ``*_TOKEN``), or by the shape of its value (a URL with a password ...)."""
    if not value:
        return False
    normal = name.replace("_", "").replace("-", "").lower()
    return (
        credentials.secret_key(name)
        or normal.endswith(("token", "credentials"))
        or credentials.find(value) is not None
    )


def _zone(environment: _Environment, options: CrontabOptions) -> tuple[str, str, Kind]:
    """The zone of an entry, why, and whether it needs a decision."""
    cron_tz = environment.get("CRON_TZ")
    if cron_tz is not None:
        return cron_tz[0], f"(CRON_TZ, line {cron_tz[1]})", Kind.mapped
    if options.zone is not None:
        return options.zone, "(--tz)", Kind.mapped
    tz = environment.get("TZ")
    if tz is not None:
        try:
            zones.get(tz[0])
        except zones.UnknownZone:
            pass
        else:
            return (
                tz[0],
                f"(TZ, line {tz[1]}: cron reads the times in CRON_TZ or the host's zone, not "
                "TZ; pass --tz with the host's zone if it was another)",
                Kind.decision,
            )
    return (
        "UTC",
        "(no CRON_TZ or --tz: pass --tz with the host's zone if it was another)",
        (Kind.decision),
    )


def _container_job(
    command: str,
    stdin: str | None,
    variables: Mapping[str, str],
    shell: str,
    image: str,
    report: _Report,
) -> dict[str, Any]:
    env: list[dict[str, Any]] = []
    for key, value in variables.items():
        if _secret(key, value):
            env.append(
                {"name": key, "valueFrom": {"secretKeyRef": {"name": ENV_SECRET, "key": key}}}
            )
        else:
            env.append({"name": key, "value": value})
    script = command
    if stdin is not None:
        env.append({"name": STDIN_VARIABLE, "value": stdin})
        # A group, on lines of its own: the command may end in '&' or a comment.
        script = f"printf '%s' \"${STDIN_VARIABLE}\" | {{\n{command}\n}}"
        report.mapped("%", f"{STDIN_VARIABLE}, piped into the command as its standard input")
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": [shell, "-c", script],
    }
    if env:
        container["env"] = env
    report.mapped("command", f"spec.jobTemplate: {shell} -c in {image}")
    found = credentials.find(command)
    if found is not None:
        report.decision(
            "command",
            f"it holds what looks like {found.describe()}: read it from a Secret instead",
        )
    return {
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        }
    }


def _handler_job(
    command: str,
    stdin: str | None,
    variables: Mapping[str, str],
    shell: tuple[str, int] | None,
    name: str,
    options: CrontabOptions,
    report: _Report,
) -> dict[str, Any]:
    payload: dict[str, Any] = {"command": command}
    report.mapped("command", "spec.payload.command")
    if stdin is not None:
        payload["stdin"] = stdin
        report.mapped("%", "spec.payload.stdin")
    if shell is not None:
        payload["shell"] = shell[0]
    env = {key: value for key, value in variables.items() if not (_secret(key, value))}
    if env:
        payload["env"] = env
    spec: dict[str, Any] = {"payload": payload}
    queue = options.queue
    if queue is not None:
        spec["queue"] = queue
    report.decision(
        "command",
        f"a handler job: a worker leasing queue {queue or 'default'} must register a "
        f"handler for job {name} that runs it",
    )
    return spec


def _split_input(command: str) -> tuple[str, str | None]:
    """cronie's do_command: the command ends at the first '%' not escaped by '\\'
    (``\\%`` is a '%'); what follows is its standard input, each further unescaped '%' a
    newline, ended by a newline."""
    kept: list[str] = []
    escaped = False
    for index, character in enumerate(command):
        if escaped:
            if character == "%":
                kept[-1] = "%"
            else:
                kept.append(character)
            escaped = False
            continue
        if character == "%":
            data = _input(command[index + 1 :])
            return "".join(kept), data or None
        escaped = character == "\\"
        kept.append(character)
    return "".join(kept), None


def _input(data: str) -> str:
    written: list[str] = []
    escaped = False
    newline = False
    for character in data:
        if escaped:
            if character != "%":
                written.append("\\")
        elif character == "%":
            character = "\n"
        escaped = character == "\\"
        if not escaped:
            written.append(character)
            newline = character != "\n"
    if escaped:
        written.append("\\")
    if newline:
        written.append("\n")
    return "".join(written)


# ---------------------------------------------------------------------------------------
# Names of crontab entries: from the command, the way a person would name the job.

# Words that only set up the command, and wrappers before the program that runs.
_SETUP: Final = frozenset({"cd", "test", "[", "[[", "true", ":", "export", "umask", "set", "sleep"})
_WRAPPERS: Final = frozenset(
    {"env", "nice", "ionice", "nohup", "sudo", "exec", "time", "timeout", "chronic", "flock"}
)
# Options of the wrappers that take a value.
_WRAPPER_VALUES: Final = frozenset({"-n", "-c", "-u", "-g", "-s", "-k", "-w", "-E"})
_INTERPRETER: Final = re.compile(
    r"(?:sh|bash|dash|zsh|ksh|python[0-9.]*|perl|ruby|php[0-9.]*|node|nodejs)"
)
_OPERATORS: Final = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
_EXTENSIONS: Final = re.compile(r"\.(?:sh|bash|py|pl|rb|php|js)$")
_PLAIN_WORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9_:.-]{0,39}")
_DURATION: Final = re.compile(r"[0-9.]+[smhd]?")
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: cron hands that to the shell as it is
        return command.split()


def _segments(tokens: list[str]) -> Iterator[list[str]]:
    segment: list[str] = []
    for token in tokens:
        if token in _OPERATORS or set(token) <= set("&|;()<>"):
            if segment:
                yield segment
            segment = []
        else:
            segment.append(token)
    if segment:
        yield segment


def _program(segment: list[str]) -> list[str]:
    """The segment from its program on: assignments and wrappers skipped."""
    index = 0
    while index < len(segment):
        word = segment[index]
        base = word.rsplit("/", 1)[-1]
        if _ASSIGNMENT.match(word):
            index += 1
        elif base in _WRAPPERS:
            index += 1
            while index < len(segment) and (
                segment[index].startswith("-") or _DURATION.fullmatch(segment[index])
            ):
                index += 2 if segment[index] in _WRAPPER_VALUES else 1
            if base == "flock" and index < len(segment):
                index += 1  # the lock file
        else:
            return segment[index:]
    return []


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _command_name(command: str) -> str:
    for segment in _segments(_tokens(command)):
        words = _program(segment)
        if not words or words[0].rsplit("/", 1)[-1] in _SETUP or "$" in words[0]:
            continue
        program = words[0].rsplit("/", 1)[-1]
        arguments = [word for word in words[1:] if not word.startswith("-")]
        if _INTERPRETER.fullmatch(program) and arguments and "-c" not in words[1:2]:
            program = arguments.pop(0).rsplit("/", 1)[-1]
        parts = [_EXTENSIONS.sub("", program)]
        if arguments and "://" not in arguments[0] and "$" not in arguments[0]:
            argument = arguments[0].rstrip("/").rsplit("/", 1)[-1]
            if _PLAIN_WORD.fullmatch(argument):
                parts.append(_EXTENSIONS.sub("", argument))
        name = _slug("-".join(parts))
        if name:
            return name
    return "crontab-entry"


def _unique(base: str, names: set[str]) -> str:
    """``base`` cut to ``MAX_NAME``, or with ``-2``, ``-3``... when an entry above has
    it: the same file always gives the same names."""
    cut = base[:MAX_NAME].rstrip("-.")
    name, count = cut, 1
    while name in names:
        count += 1
        suffix = f"-{count}"
        name = cut[: MAX_NAME - len(suffix)].rstrip("-.") + suffix
    names.add(name)
    return name
