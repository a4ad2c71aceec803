"""A small Job controller for tests: what the Job controller and the kubelet do to a
batch/v1 Job (a pod runs; the Job completes, fails, or runs past its deadline), one
step at a time as a test says, on the emulated API server (which runs no controller).

    controller = JobController(kube, "team-a")
    job = await controller.created("nightly-r0-1-1")  # waits for the Job
    await controller.fail("nightly-r0-1-1", "cannot reach the ledger")
"""

from __future__ import annotations

from typing import Any

from kube import emulator


class JobController:
    """The Job controller of these tests: it moves a Job through what a real one does
    (a pod runs, then the Job completes or fails), one step at a time, as told."""

    def __init__(self, kube: emulator.Emulator, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    async def created(self, name: str) -> dict[str, Any]:
        job = await self.kube.wait_for(
            "jobs", name, lambda o: o is not None, namespace=self.namespace
        )
        assert job is not None
        return job

    def job(self, name: str) -> dict[str, Any] | None:
        return self.kube.get("jobs", name, self.namespace)

    async def _pod(self, name: str, exit_code: int, message: str = "", reason: str = "") -> None:
        job = await self.created(name)
        labels = job["spec"]["template"]["metadata"]["labels"]
        containers_ = job["spec"]["template"]["spec"]["containers"]
        statuses = []
        for index, container in enumerate(containers_):
            last = index == 0  # the first container ends last
            terminated: dict[str, Any] = {
                "exitCode": exit_code if last else 0,
                "reason": reason or ("Error" if exit_code and last else "Completed"),
                "finishedAt": f"2026-03-15T01:00:0{9 if last else 5}Z",
            }
            if last and message:
                terminated["message"] = message
            statuses.append({"name": container["name"], "state": {"terminated": terminated}})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-x7k2p",
                "namespace": self.namespace,
                "labels": {**labels, "batch.kubernetes.io/job-name": name, "job-name": name},
            },
            "spec": job["spec"]["template"]["spec"],
        }
        await self.kube.create(pod)
        await self.kube.patch(
            "pods",
            pod["metadata"]["name"],
            {
                "status": {
                    "phase": "Failed" if exit_code else "Succeeded",
                    "containerStatuses": statuses,
                }
            },
            namespace=self.namespace,
            subresource="status",
        )

    async def _condition(self, name: str, kind: str, reason: str, message: str) -> None:
        counts = {"succeeded": 1} if kind == "Complete" else {"failed": 1}
        condition = {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": "2026-03-15T01:00:10Z",
        }
        await self.kube.patch(
            "jobs",
            name,
            {"status": {"active": 0, **counts, "conditions": [condition]}},
            namespace=self.namespace,
            subresource="status",
        )

    async def succeed(self, name: str) -> None:
        await self._pod(name, 0)
        await self._condition(
            name, "Complete", "CompletionsReached", "Reached expected number of succeeded pods"
        )

    async def fail(self, name: str, message: str) -> None:
        await self._pod(name, 2, message)
        await self._condition(
            name, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"
        )

    async def exceed_deadline(self, name: str) -> None:
        await self._pod(name, 137, reason="Error")
        await self._condition(
            name, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
        )

    async def delete(self, name: str) -> None:
        await self.kube.delete("jobs", name, namespace=self.namespace)
