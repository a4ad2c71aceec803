"""The end-to-end checks, against a cluster where e2e/run.sh installed tickwork and the
example worker: the standard library and kubectl only, so it runs unchanged in CI.

- the example ScheduledJobs become Ready;
- cron: `hello` (every minute) gets succeeded runs;
- delayed: a run enqueued with delaySeconds starts no earlier and succeeds;
- retried and failing: a `flaky-export` run succeeds on its second attempt, a
  `poison-pill` run ends dead, in the DLQ;
- a container job (`e2e-container`, run by the chart's job-runner): its run's first
  attempt is a Job that fails with its container's termination message, its retry a
  second Job that succeeds; one Job per attempt, owned by the ScheduledJob, and
  `kubectl get sj` shows the last one;
- killing a scheduler pod loses nothing: every minute of `hello` across the kill has
  exactly one run, and each succeeded;
- killing the leading operator pod: the webhook still refuses an invalid object at once
  (the standby answers admission), the standby takes the Lease `tickwork-operator`
  within its duration and a ScheduledJob applied after the kill becomes Ready.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

T = TypeVar("T")
TEAM = "default"  # the examples' namespace, their tenant
OPERATOR_LEASE = "tickwork-operator"
LEASE_SECONDS = 10  # the chart's operator.leaseSeconds


def kubectl(*args: str) -> str:
    return subprocess.run(["kubectl", *args], check=True, capture_output=True, text=True).stdout


def kubectl_input(text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl with ``text`` on its standard input; the caller reads the outcome."""
    return subprocess.run(["kubectl", *args], input=text, capture_output=True, text=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def port_forward(namespace: str, service: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        ["kubectl", "-n", namespace, "port-forward", f"svc/{service}", f"{port}:80"],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for("the dispatcher through port-forward", lambda: _answers(url + "/healthz"), 60)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def wait_for(what: str, probe: Callable[[], T | None], seconds: float) -> T:
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found:
            print(f"ok: {what}")
            return found
        if time.monotonic() > deadline:
            sys.exit(f"FAILED: {what} (waited {seconds:.0f} s)")
        time.sleep(2)


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            sys.exit(f"FAILED: {method} {path}: {error.code} {error.read().decode()}")

    def runs(self, job: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.call("GET", f"/v1/jobs/{job}/runs?limit=500")["items"]
        return items

    def run(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.call("GET", f"/v1/runs/{run_id}")
        return found


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def ready_jobs() -> bool:
    listed = json.loads(kubectl("-n", TEAM, "get", "scheduledjobs", "-o", "json"))["items"]
    ready = [
        o
        for o in listed
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in o.get("status", {}).get("conditions", [])
        )
    ]
    return len(listed) > 0 and len(ready) == len(listed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", default="tickwork")
    parser.add_argument("--release", default="tw")
    options = parser.parse_args()

    wait_for("every example ScheduledJob is Ready", ready_jobs, 120)
    # Issued for the audience the dispatcher accepts by default, as the worker's token.
    create = ["create", "token", "example-worker", "--audience=tickwork", "--duration=1h"]
    token = kubectl("-n", TEAM, *create).strip()
    dispatcher = f"{options.release}-tickwork-dispatcher"
    with port_forward(options.namespace, dispatcher) as url:
        api = Api(url, token)

        def succeeded_cron() -> list[dict[str, Any]]:
            return [r for r in api.runs("hello") if r["state"] == "succeeded"]

        wait_for("cron: hello has a succeeded run", succeeded_cron, 150)

        delayed = api.call("POST", "/v1/jobs/hello/runs", {"delaySeconds": 20})
        flaky = api.call("POST", "/v1/jobs/flaky-export/runs", {})
        poison = api.call("POST", "/v1/jobs/poison-pill/runs", {})

        def ended(run_id: str, state: str) -> dict[str, Any] | None:
            run = api.run(run_id)
            return run if run["state"] == state else None

        delayed_id, flaky_id = delayed["runId"], flaky["runId"]
        done = wait_for("delayed: the run succeeds", lambda: ended(delayed_id, "succeeded"), 120)
        started = instant(done["attempts"][0]["leasedAt"])
        if started < instant(delayed["dueAt"]):
            sys.exit(f"FAILED: the delayed run started at {started}, before {delayed['dueAt']}")
        done = wait_for("retried: flaky-export succeeds", lambda: ended(flaky_id, "succeeded"), 120)
        if done["attempt"] < 2:
            sys.exit("FAILED: flaky-export succeeded without its retry")
        wait_for("failing: poison-pill ends dead", lambda: ended(poison["runId"], "dead"), 120)
        dlq = api.call("GET", "/v1/dlq?job=poison-pill")["items"]
        if poison["runId"] not in {item["runId"] for item in dlq}:
            sys.exit("FAILED: the dead poison-pill run is not in the DLQ")
        print("ok: the dead run is in the DLQ")

        container_job(api)

        # A scheduler replica dies (no graceful shutdown): its shards must move over and
        # every cron minute across the kill still runs exactly once.
        selector = (
            f"app.kubernetes.io/instance={options.release},app.kubernetes.io/component=scheduler"
        )
        pods = kubectl("-n", options.namespace, "get", "pods", "-o", "name", "-l", selector).split()
        killed_at = datetime.now(UTC)
        kubectl("-n", options.namespace, "delete", pods[0], "--grace-period=0", "--force")
        print(f"killed {pods[0]} at {killed_at:%H:%M:%S}")
        first = killed_at.replace(second=0, microsecond=0) - timedelta(minutes=1)
        last = first + timedelta(minutes=3)

        def every_minute() -> list[dict[str, Any]] | None:
            if datetime.now(UTC) < last + timedelta(seconds=45):
                return None
            return api.runs("hello")

        found = wait_for("three minutes of cron runs across the kill", every_minute, 360)
        minutes: dict[datetime, list[str]] = {}
        for run in found:
            due = instant(run["dueAt"])
            # Cron runs of hello fall on the minute (jitterSeconds 0); enqueued ones do not.
            on_the_minute = due == due.replace(second=0, microsecond=0)
            if first <= due <= last and on_the_minute and run.get("idempotencyKey") is None:
                minutes.setdefault(due, []).append(run["state"])
        expected = [first + timedelta(minutes=n) for n in range(4)]
        problems = [
            f"{m:%H:%M}: {minutes.get(m)}" for m in expected if minutes.get(m) != ["succeeded"]
        ]
        if problems:
            sys.exit("FAILED: cron runs across the scheduler kill: " + ", ".join(problems))
        print("ok: every minute across the scheduler kill ran exactly once and succeeded")

    kill_the_leading_operator(options.namespace, options.release)


CONTAINER_JOB = "e2e-container"
FAILS_ON_PURPOSE = "e2e: the first attempt fails on purpose"


def container_job(api: Api) -> None:
    """One run of the container job, failing its first attempt: two Jobs, one each."""
    run_id = api.call("POST", f"/v1/jobs/{CONTAINER_JOB}/runs", {"payload": {"failFirst": True}})[
        "runId"
    ]

    def succeeded() -> dict[str, Any] | None:
        run = api.run(run_id)
        return run if run["state"] == "succeeded" else None

    done = wait_for("container job: the run succeeds with its second Job", succeeded, 300)
    if done["attempt"] != 2:
        sys.exit(f"FAILED: the container job's run took {done['attempt']} attempt(s), not 2")
    first_error = (done["attempts"][0].get("error") or {}).get("message", "")
    if FAILS_ON_PURPOSE not in first_error:
        sys.exit(f"FAILED: the first attempt's error lacks the termination message: {first_error}")
    print("ok: the failed Job's termination message is the attempt's error")
    listed = json.loads(
        kubectl("-n", TEAM, "get", "jobs", "-l", f"tickwork.dev/run={run_id}", "-o", "json")
    )["items"]
    names = sorted(item["metadata"]["name"] for item in listed)
    expected = [f"{CONTAINER_JOB}-{run_id}-{attempt}" for attempt in (1, 2)]
    if names != expected:
        sys.exit(f"FAILED: the run's Jobs are {names}, not one per attempt {expected}")
    for item in listed:
        owners = [o["kind"] for o in item["metadata"].get("ownerReferences", [])]
        if owners != ["ScheduledJob"] or item["spec"].get("backoffLimit") != 0:
            sys.exit(
                f"FAILED: Job {item['metadata']['name']}: owners {owners}, spec {item['spec']}"
            )
    print("ok: one Job per attempt, owned by the ScheduledJob")

    def shows_last_job() -> str | None:
        found = kubectl(
            "-n", TEAM, "get", "sj", CONTAINER_JOB, "-o", "jsonpath={.status.lastJobName}"
        )
        return found if found.strip() == expected[1] else None

    wait_for("kubectl get sj shows the last Job", shows_last_job, 60)
    print(kubectl("-n", TEAM, "get", "sj", CONTAINER_JOB))


def lease_holder(namespace: str) -> str | None:
    found = kubectl(
        "-n", namespace, "get", "lease", OPERATOR_LEASE, "-o", "jsonpath={.spec.holderIdentity}"
    ).strip()
    return found or None


def scheduled_job(name: str, cron: str) -> str:
    return json.dumps(
        {
            "apiVersion": "tickwork.dev/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": name, "namespace": TEAM},
            "spec": {"schedule": {"cron": cron}, "queue": "default"},
        }
    )


def kill_the_leading_operator(namespace: str, release: str) -> None:
    """The leader dies without a word (its Lease is not released): admission goes on on
    the standby, which takes the Lease once it expires and reconciles what came since."""
    leader = wait_for("an operator holds the Lease", lambda: lease_holder(namespace), 60)
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    pods = kubectl("-n", namespace, "get", "pods", "-o", "name", "-l", selector).split()
    if f"pod/{leader}" not in pods or len(pods) < 2:
        sys.exit(f"FAILED: the Lease names {leader!r}; the operator pods are {pods}")
    killed_at = time.monotonic()
    kubectl("-n", namespace, "delete", f"pod/{leader}", "--grace-period=0", "--force")
    print(f"killed the leading operator {leader}")

    refused = kubectl_input(scheduled_job("e2e-invalid", "61 * * * *"), "apply", "-f", "-")
    if refused.returncode == 0 or "denied the request" not in refused.stderr:
        sys.exit(f"FAILED: an invalid object during the failover: {refused.stderr or 'applied'}")
    print("ok: the standby's webhook refused an invalid object during the failover")

    def new_leader() -> str | None:
        holder = lease_holder(namespace)
        return holder if holder not in (None, leader) else None

    successor = wait_for("the standby takes the Lease", new_leader, 60)
    took = time.monotonic() - killed_at
    print(f"ok: {successor} leads {took:.0f}s after the kill")
    if took > LEASE_SECONDS * 2 + 10:
        sys.exit(f"FAILED: the takeover took {took:.0f}s (Lease of {LEASE_SECONDS}s)")

    applied = kubectl_input(scheduled_job("e2e-after-failover", "*/5 * * * *"), "apply", "-f", "-")
    if applied.returncode != 0:
        sys.exit(f"FAILED: applying a ScheduledJob after the failover: {applied.stderr}")

    def is_ready() -> bool:
        found = json.loads(
            kubectl("-n", TEAM, "get", "scheduledjob", "e2e-after-failover", "-o", "json")
        )
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in found.get("status", {}).get("conditions", [])
        )

    wait_for("a ScheduledJob applied after the failover is Ready", is_ready, 60)
    kubectl("-n", TEAM, "delete", "scheduledjob", "e2e-after-failover", "--wait=true")
    print("ok: the new leader reconciled a ScheduledJob applied after the failover")


if __name__ == "__main__":
    main()
