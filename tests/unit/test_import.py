"""``tickwork import``: CronJobs and crontabs become ScheduledJobs field by field, with
what each source's scheduler gave its jobs (a zone, cron's environment), and what cannot
be imported is named while the rest still is. That they fire when their sources fired
(a minute walk of every sample around clock changes), that an API server with the CRD
and the admission webhook takes them, and the worked example of docs/migrating.md are
checked in tests/test_import.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from tickwork.cli import cli

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
