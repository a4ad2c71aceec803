"""``tickwork import``: CronJobs and crontabs become ScheduledJobs that an API server
with the CRD and the admission webhook take, that fire when their source fired (a
Kubernetes CronJob, read the way its controller's robfig/cron reads it; a crontab, the
way cronie reads it), except where docs/migrating.md says tickwork's DST rules differ,
and that a reader of docs/migrating.md can walk through to ``kubectl get sj``.

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
from click.testing import CliRunner, Result
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

from tickwork.cli import cli
from tickwork.engine import manifests
from tickwork.operator import admission, crd

ROOT = Path(__file__).resolve().parents[1]

CRONJOBS = """\
apiVersion: v1
kind: List
items:
- apiVersion: batch/v1
  kind: CronJob
  metadata:
    name: nightly-backup
    namespace: billing
    uid: 0b9f2c4e-0000-4000-8000-000000000001
    resourceVersion: "4711"
    creationTimestamp: "2025-01-01T00:00:00Z"
    labels:
      team: billing
      app.kubernetes.io/managed-by: Helm
    annotations:
      owner: ops@example.com
      kubectl.kubernetes.io/last-applied-configuration: "{}"
  spec:
    schedule: "30 2 * * *"
    timeZone: Europe/Berlin
    concurrencyPolicy: Forbid
    suspend: false
    startingDeadlineSeconds: 600
    successfulJobsHistoryLimit: 3
    failedJobsHistoryLimit: 1
    jobTemplate:
      metadata:
        creationTimestamp: null
        labels:
          team: billing
      spec:
        backoffLimit: 2
        activeDeadlineSeconds: 1800
        ttlSecondsAfterFinished: 3600
        template:
          metadata:
            labels:
              team: billing
          spec:
            restartPolicy: Never
            serviceAccountName: backup
            containers:
            - name: backup
              image: billing/backup:1.4
              args: ["--target", "s3://backups/billing"]
              resources:
                limits:
                  memory: 256Mi
  status:
    lastScheduleTime: "2026-03-14T01:30:00Z"
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: ny-report
  namespace: team-a
spec:
  schedule: "CRON_TZ=America/New_York 30 1 * * *"
  suspend: true
  concurrencyPolicy: Replace
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: report
            image: reports/ny:2
---
apiVersion: batch/v1beta1
kind: CronJob
metadata:
  name: cleanup
spec:
  schedule: "@daily"
  jobTemplate:
    spec:
      backoffLimit: 0
      template:
        spec:
          containers:
          - name: cleanup
            image: ops/cleanup:1
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: half-hourly
  namespace: team-a
spec:
  schedule: "0/30 2 ? * *"
  timeZone: Europe/Berlin
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - name: sync
            image: ops/sync:1
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
"""

CRONTAB = r"""# reports host, as `crontab -l` shows it
SHELL=/bin/bash
MAILTO=ops@example.com
TZ=Europe/Berlin
PGHOST = db.internal
REPORT_TOKEN='t0k3n'

30 2 * * * /opt/reports/backup.sh --full >> /var/log/backup.log 2>&1
0,30 2 * * *	/opt/reports/sync.sh
*/15 2 * * * /opt/reports/poll.sh
0 * * * * php /srv/app/artisan schedule:run
@weekly /opt/reports/vacuum.sh
0 6 * * 1-5 mail -s "daily report" ops@example.com%Good morning,%100\% done.%
RANDOM_DELAY=2
CRON_TZ=America/New_York
30 1 * * * /opt/reports/backup.sh --ny
-15 3 * * * /opt/reports/quiet.sh
"""

SYSTEM_CRONTAB = """\
SHELL=/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin

# m h dom mon dow user\tcommand
17 *\t* * *\troot    cd / && run-parts --report /etc/cron.hourly
25 6\t* * *\troot\ttest -x /usr/sbin/anacron || ( cd / && run-parts --report /etc/cron.daily )
47 6\t* * 7\tbackup\t/usr/local/bin/backup.sh %nightly%
"""


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin)


def documents(result: Result) -> dict[str, dict[str, Any]]:
    """The ScheduledJobs printed, by name."""
    found = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    assert all(d["apiVersion"] == "tickwork.dev/v1alpha1" for d in found)
    assert all(d["kind"] == "ScheduledJob" for d in found)
    return {d["metadata"]["name"]: d for d in found}


def report(result: Result) -> list[str]:
    return result.stderr.splitlines()


def about(lines: list[str], source: str) -> list[str]:
    return [line for line in lines if line.startswith(source + ": ")]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    return path


# ---------------------------------------------------------------------------------------
# CronJobs


def test_a_cronjob_maps_field_by_field_and_says_so(tmp_path: Path) -> None:
    result = run("import", "cronjob", "-f", str(write(tmp_path, "cronjobs.yaml", CRONJOBS)))
    assert result.exit_code == 0, result.output
    found = documents(result)
    assert list(found) == ["nightly-backup", "ny-report", "cleanup", "half-hourly"]
    assert found["nightly-backup"]["metadata"] == {
        "name": "nightly-backup",
        "namespace": "billing",
        "labels": {"team": "billing"},
        "annotations": {"owner": "ops@example.com"},
    }
    assert found["nightly-backup"]["spec"] == {
        "schedule": {
            "cron": "30 2 * * *",
            "timeZone": "Europe/Berlin",
            "jitterSeconds": 0,
            "startingDeadlineSeconds": 600,
        },
        "queue": "containers",
        "overlapPolicy": "Forbid",
        "paused": False,
        "timeoutSeconds": 1800,
        "retry": {"maxAttempts": 3, "baseSeconds": 10, "maxSeconds": 360},
        "jobTemplate": {
            "metadata": {"labels": {"team": "billing"}},
            "spec": {
                "ttlSecondsAfterFinished": 3600,
                "template": {
                    "metadata": {"labels": {"team": "billing"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": "backup",
                        "containers": [
                            {
                                "name": "backup",
                                "image": "billing/backup:1.4",
                                "args": ["--target", "s3://backups/billing"],
                                "resources": {"limits": {"memory": "256Mi"}},
                            }
                        ],
                    },
                },
            },
        },
    }
    source = "cronjob billing/nightly-backup"
    assert about(report(result), source) == [
        f"{source}: metadata.name → metadata.name",
        f"{source}: metadata.namespace → metadata.namespace",
        f"{source}: metadata.uid dropped (set by the API server)",
        f"{source}: metadata.resourceVersion dropped (set by the API server)",
        f"{source}: metadata.creationTimestamp dropped (set by the API server)",
        f"{source}: metadata.labels[app.kubernetes.io/managed-by] dropped (written by the "
        "tool that applied the CronJob, which writes its own)",
        f"{source}: metadata.labels → metadata.labels (1 kept)",
        f"{source}: metadata.annotations[kubectl.kubernetes.io/last-applied-configuration] "
        "dropped (written by the tool that applied the CronJob, which writes its own)",
        f"{source}: metadata.annotations → metadata.annotations (1 kept)",
        f"{source}: status dropped (written by the CronJob controller; the operator writes "
        "the ScheduledJob's)",
        f"{source}: spec.timeZone → spec.schedule.timeZone Europe/Berlin",
        f"{source}: spec.schedule → spec.schedule.cron 30 2 * * *",
        f"{source}: spec.schedule.jitterSeconds set to 0 (a CronJob starts at the exact "
        "minute; tickwork's default spreads starts over 60 s)",
        f"{source}: spec.startingDeadlineSeconds → spec.schedule.startingDeadlineSeconds 600",
        f"{source}: spec.concurrencyPolicy → spec.overlapPolicy Forbid",
        f"{source}: spec.suspend → spec.paused",
        f"{source}: spec.successfulJobsHistoryLimit dropped (tickwork keeps run history itself)",
        f"{source}: spec.failedJobsHistoryLimit dropped (tickwork keeps run history itself)",
        f"{source}: spec.queue set to containers (the queue `tickwork job-runner` serves)",
        f"{source}: spec.jobTemplate.metadata.creationTimestamp dropped (a Job takes only "
        "labels and annotations)",
        f"{source}: spec.jobTemplate.spec.backoffLimit → spec.retry.maxAttempts 3 (tickwork "
        "retries; the Job gets backoffLimit: 0)",
        f"{source}: spec.retry set to baseSeconds 10, maxSeconds 360 (Kubernetes retried a pod "
        "after 10 s, doubling up to 6 min; tickwork waits a random time up to that)",
        f"{source}: spec.jobTemplate.spec.activeDeadlineSeconds → spec.timeoutSeconds 1800",
        f"{source}: spec.jobTemplate → spec.jobTemplate (its pod template and other fields as "
        "they were)",
    ]
    assert report(result)[-1] == "4 ScheduledJobs"
    assert "document 5: dropped (Deployment, not a CronJob)" in report(result)


def test_a_zone_in_the_schedule_defaults_and_the_old_api_version(tmp_path: Path) -> None:
    result = run("import", "cronjob", "-f", "-", stdin=CRONJOBS)
    assert result.exit_code == 0, result.output
    found = documents(result)
    ny = found["ny-report"]["spec"]
    assert ny["schedule"] == {
        "cron": "30 1 * * *",
        "timeZone": "America/New_York",
        "jitterSeconds": 0,
    }
    assert (ny["paused"], ny["overlapPolicy"]) == (True, "Replace")
    # Kubernetes' backoffLimit 6 when absent; no deadline when absent: the longest tickwork has.
    assert ny["retry"] == {"maxAttempts": 7, "baseSeconds": 10, "maxSeconds": 360}
    assert ny["timeoutSeconds"] == 7 * 24 * 3600
    cleanup = found["cleanup"]
    assert "namespace" not in cleanup["metadata"]
    assert cleanup["spec"]["schedule"] == {"cron": "@daily", "timeZone": "UTC", "jitterSeconds": 0}
    assert cleanup["spec"]["overlapPolicy"] == "Allow"
    assert cleanup["spec"]["retry"] == {"maxAttempts": 1}
    lines = report(result)
    assert (
        "cronjob team-a/ny-report: spec.schedule → spec.schedule.timeZone America/New_York: its "
        "CRON_TZ= prefix (Kubernetes refuses a zone in the schedule since 1.29)"
    ) in lines
    assert (
        "cronjob team-a/ny-report: spec.jobTemplate.spec.activeDeadlineSeconds needs a decision: "
        "absent: the Job had no deadline, and tickwork needs one: spec.timeoutSeconds 604800 "
        "(7 days, the most it takes); lower it"
    ) in lines
    assert any(
        line.startswith(
            "cronjob team-a/ny-report: spec.jobTemplate.spec.template.spec.restartPolicy needs "
            "a decision: OnFailure kept"
        )
        for line in lines
    )
    assert (
        "cronjob cleanup: spec.timeZone needs a decision: absent: read as UTC. Kubernetes read "
        "the schedule in kube-controller-manager's zone, UTC on most clusters: set "
        "spec.schedule.timeZone if yours ran in another"
    ) in lines
    assert (
        "cronjob cleanup: spec.concurrencyPolicy → spec.overlapPolicy Allow (Kubernetes' default)"
    ) in lines
    # What robfig/cron takes and tickwork writes otherwise.
    assert found["half-hourly"]["spec"]["schedule"]["cron"] == "0-59/30 2 * * *"
    assert (
        "cronjob team-a/half-hourly: spec.schedule → spec.schedule.cron 0-59/30 2 * * *: "
        "0/30 2 ? * * as robfig/cron reads it ('?' is '*', 'N/S' is 'N-last/S')"
    ) in lines


def test_a_cronjob_that_cannot_be_imported_is_named_and_the_others_still_are() -> None:
    def cronjob(name: str, schedule: str, **spec: Any) -> dict[str, Any]:
        template = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
        return {
            "apiVersion": spec.pop("apiVersion", "batch/v1"),
            "kind": "CronJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedule": schedule, "jobTemplate": template, **spec},
        }

    stream = yaml.safe_dump_all(
        [
            cronjob("every", "@every 5m"),
            cronjob("fine", "0 3 * * *", timeZone="Europe/Berlin"),
            cronjob("mars", "0 3 * * *", timeZone="Mars/Olympus"),
            cronjob("two-zones", "TZ=Europe/Paris 0 3 * * *", timeZone="Europe/Berlin"),
            cronjob("fine", "0 4 * * *"),
            cronjob("ancient", "0 3 * * *", apiVersion="batch/v2alpha1"),
            cronjob("policy", "0 3 * * *", concurrencyPolicy="Sometimes"),
        ]
    )
    result = run("import", "cronjob", "-f", "-", stdin=stream)
    assert result.exit_code == 1
    assert list(documents(result)) == ["fine"]
    refused = [line for line in report(result) if ": refused: " in line]
    assert refused == [
        "cronjob default/every: refused: spec.schedule: cron expression '@every 5m': tickwork "
        "fires at clock times, not at intervals from a start; write it as the cron step "
        "'*/5 * * * *'",
        "cronjob default/mars: refused: spec.timeZone: unknown time zone 'Mars/Olympus' "
        "(expected an IANA name like 'Europe/Berlin')",
        "cronjob default/two-zones: refused: spec.schedule: TZ=Europe/Paris in the schedule and "
        "timeZone Europe/Berlin disagree",
        "cronjob default/fine: refused: metadata.name: a CronJob of this name came earlier in "
        "the input",
        "cronjob default/ancient: refused: apiVersion: 'batch/v2alpha1': tickwork reads batch/v1 "
        "and batch/v1beta1 CronJobs",
        "cronjob default/policy: refused: spec.concurrencyPolicy: 'Sometimes' is not Allow, "
        "Forbid or Replace",
    ]
    assert report(result)[-1] == "1 ScheduledJob, 6 refused"

    nothing = run("import", "cronjob", "-f", "-", stdin="kind: ConfigMap\n")
    assert nothing.exit_code == 1
    assert "input: refused: no CronJob in it" in report(nothing)
    broken = run("import", "cronjob", "-f", "-", stdin="kind: [CronJob\n")
    assert broken.exit_code == 1 and report(broken)[0].startswith("-: refused: not YAML: ")


@pytest.mark.parametrize(
    "args",
    [
        ["import", "cronjob"],
        ["import", "cronjob", "-f", "no-such-file.yaml"],
        ["import", "crontab"],
        ["import", "crontab", "-", "--tz", "Mars/Olympus"],
        ["import", "crontab", "-", "--queue", "Not A Queue"],
        ["import", "crontab", "-", "--namespace", "Not_A_Namespace"],
        ["import", "crontab", "-", "--image", "reports/cron:2", "--queue", "reports"],
        ["import", "crontab", "-", "--queue", "containers"],
    ],
)
def test_a_usage_error_exits_2(args: list[str]) -> None:
    result = run(*args, stdin="0 3 * * * true\n")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""


# ---------------------------------------------------------------------------------------
# Crontabs


def test_crontab_lines_become_container_jobs_with_the_environment_cron_gave_them(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "reports.crontab", CRONTAB)
    result = run(
        "import",
        "crontab",
        str(path),
        "--tz",
        "Europe/Berlin",
        "--image",
        "reports/cron:2.0",
        "--namespace",
        "reports",
    )
    assert result.exit_code == 0, result.output
    found = documents(result)
    # Named from the command, unique in the output, the same every time.
    assert list(found) == [
        "backup",
        "sync",
        "poll",
        "artisan-schedule-run",
        "vacuum",
        "mail",
        "backup-2",
        "quiet",
    ]
    assert documents(run("import", "crontab", "-", "--image", "x", stdin=CRONTAB)).keys() == (
        found.keys()
    )
    backup = found["backup"]
    assert backup["metadata"] == {"name": "backup", "namespace": "reports"}
    environment = [
        {"name": "TZ", "value": "Europe/Berlin"},
        {"name": "PGHOST", "value": "db.internal"},
        {
            "name": "REPORT_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "crontab-env", "key": "REPORT_TOKEN"}},
        },
    ]
    assert backup["spec"] == {
        "schedule": {"cron": "30 2 * * *", "timeZone": "Europe/Berlin", "jitterSeconds": 0},
        "queue": "containers",
        "overlapPolicy": "Allow",
        "timeoutSeconds": 7 * 24 * 3600,
        "retry": {"maxAttempts": 1},
        "jobTemplate": {
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "command",
                                "image": "reports/cron:2.0",
                                "command": [
                                    "/bin/bash",
                                    "-c",
                                    "/opt/reports/backup.sh --full >> /var/log/backup.log 2>&1",
                                ],
                                "env": environment,
                            }
                        ],
                    }
                }
            }
        },
    }
    # '%' ends the command; the rest is its standard input, '%' a newline, '\%' a '%'.
    [mail] = found["mail"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert mail["command"][2] == (
        'printf \'%s\' "$CRON_STDIN" | {\nmail -s "daily report" ops@example.com\n}'
    )
    assert mail["env"][-1] == {"name": "CRON_STDIN", "value": "Good morning,\n100% done.\n"}
    # CRON_TZ and RANDOM_DELAY apply to the entries below them.
    assert found["backup-2"]["spec"]["schedule"] == {
        "cron": "30 1 * * *",
        "timeZone": "America/New_York",
        "jitterSeconds": 120,
    }
    assert found["vacuum"]["spec"]["schedule"]["cron"] == "@weekly"
    lines = report(result)
    assert about(lines, f"{path}:3") == [
        f"{path}:3: MAILTO dropped (tickwork mails nothing: a failed run's error is in "
        "`tickwork runs list`, the dashboard and a RunDead Event)"
    ]
    assert about(lines, f"{path}:6") == [
        f"{path}:6: REPORT_TOKEN needs a decision: its value is not copied: container "
        "jobs read it from the Secret crontab-env (create it with the key REPORT_TOKEN), "
        "handler jobs' workers from their own secrets"
    ]
    assert "t0k3n" not in result.stdout
    assert about(lines, f"{path}:8")[:2] == [
        f"{path}:8: schedule → spec.schedule.cron 30 2 * * *",
        f"{path}:8: zone → spec.schedule.timeZone Europe/Berlin (--tz)",
    ]
    assert f"{path}:17: zone → spec.schedule.timeZone America/New_York (CRON_TZ, line 15)" in (
        lines
    )
    assert f"{path}:17: - dropped (cronie's switch that keeps the command out of syslog)" in (lines)
    assert lines[-1] == "8 ScheduledJobs"


def test_a_system_crontab_names_users_and_gives_handler_jobs(tmp_path: Path) -> None:
    path = write(tmp_path, "etc/crontab", SYSTEM_CRONTAB)
    result = run("import", "crontab", str(path), "--queue", "ops")
    assert result.exit_code == 0, result.output
    found = documents(result)
    assert list(found) == ["run-parts-cron-hourly", "run-parts-cron-daily", "backup"]
    path_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin"}
    assert found["run-parts-cron-hourly"]["spec"] == {
        "schedule": {"cron": "17 * * * *", "timeZone": "UTC", "jitterSeconds": 0},
        "queue": "ops",
        "overlapPolicy": "Allow",
        "timeoutSeconds": 7 * 24 * 3600,
        "retry": {"maxAttempts": 1},
        "payload": {
            "command": "cd / && run-parts --report /etc/cron.hourly",
            "shell": "/bin/sh",
            "env": path_env,
        },
    }
    assert found["backup"]["spec"]["payload"] == {
        "command": "/usr/local/bin/backup.sh ",
        "stdin": "nightly\n",
        "shell": "/bin/sh",
        "env": path_env,
    }
    lines = report(result)
    source = f"{path}:7"
    assert (
        f"{source}: user needs a decision: backup ran it; the worker runs it as its own user"
        in (lines)
    )
    assert (
        f"{source}: command needs a decision: a handler job: a worker leasing queue ops must "
        "register a handler for job backup that runs it"
    ) in lines
    assert (
        f"{source}: zone needs a decision: spec.schedule.timeZone UTC (no CRON_TZ or --tz: pass "
        "--tz with the host's zone if it was another)"
    ) in lines
    # The same file read as a user's crontab: "root" would be the command.
    assert list(documents(run("import", "crontab", str(path), "--user"))) == [
        "root-cd",
        "root-test",
        "backup-backup",
    ]


def test_tz_is_the_zone_only_when_nothing_says_otherwise() -> None:
    result = run("import", "crontab", "-", stdin="TZ=Asia/Tokyo\n0 9 * * * date\n")
    assert result.exit_code == 0, result.output
    assert documents(result)["date"]["spec"]["schedule"]["timeZone"] == "Asia/Tokyo"
    assert (
        "crontab:2: zone needs a decision: spec.schedule.timeZone Asia/Tokyo (TZ, line 1: cron "
        "reads the times in CRON_TZ or the host's zone, not TZ; pass --tz with the host's zone "
        "if it was another)"
    ) in report(result)


def test_crontab_lines_cron_would_not_run_or_tickwork_cannot_are_refused() -> None:
    text = (
        "@reboot /usr/local/bin/agent\n"
        "61 * * * * echo late\n"
        "0 3 * * *\n"
        "CRON_TZ=Mars/Olympus\n"
        "0 3 * * * curl -fsS https://user:hunter2@example.com/ping\n"
        "0 4 * * * echo fine\n"
    )
    result = run("import", "crontab", "-", stdin=text)
    assert result.exit_code == 1
    assert list(documents(result)) == ["echo-fine"]
    assert [line for line in report(result) if ": refused: " in line] == [
        "crontab:1: refused: schedule: cron expression '@reboot': tickwork has no boot; enqueue "
        "a run when your service starts, or use runAt",
        "crontab:2: refused: schedule: invalid cron expression '61 * * * *': minute field: 61 "
        "is out of range 0-59",
        "crontab:3: refused: expected five time fields and a command",
        "crontab:4: refused: CRON_TZ: unknown time zone 'Mars/Olympus' (expected an IANA name "
        "like 'Europe/Berlin')",
        "crontab:5: refused: spec.payload.command: looks like a URL with a password; payloads "
        'must not carry secrets: pass a reference such as {"secretRef": "name"} and resolve it '
        "in the worker",
    ]
    assert report(result)[-1] == "1 ScheduledJob, 4 refused"
    # In a container job the command is no payload: taken, with a word about it.
    contained = run("import", "crontab", "-", "--image", "ops/cron:1", stdin=text)
    assert "echo-fine" in documents(contained)
    assert (
        "crontab:5: command needs a decision: it holds what looks like a URL with a password: "
        "read it from a Secret instead"
    ) in report(contained)
    empty = run("import", "crontab", "-", stdin="# nothing yet\nMAILTO=root\n")
    assert empty.exit_code == 1 and "crontab: refused: no crontab entry in it" in report(empty)


# ---------------------------------------------------------------------------------------
# The round trip: an API server with the CRD and the webhook takes them, and they fire
# when their sources fired.


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
