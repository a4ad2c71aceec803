"""``tickwork job-runner``: the runs of container jobs (``spec.jobTemplate``) as
Kubernetes Jobs, one per attempt.

An adapter beside the worker SDK: it speaks HTTP to the tickwork API with the SDK's
client, as any worker does (its own token), and to the Kubernetes API with
kubernetes_asyncio; it imports nothing of the server.

- ``runner``: ``JobRunner``, the lease loop and one task per held run;
- ``manifest``: the Job of an attempt, and what a Job says of its attempt;
- ``kube``: JSON calls and watched caches of the Kubernetes API;
- ``settings``: ``JobRunnerSettings``; ``health``, ``metrics``: what its health port
  (every role's, ``coordination.health``, started by the CLI) answers.
"""

from __future__ import annotations

from tickwork.jobrunner.runner import JobRunner, RunnerSignals
from tickwork.jobrunner.settings import JobRunnerSettings

__all__ = ["JobRunner", "JobRunnerSettings", "RunnerSignals"]
