"""What the job-runner's health port answers: ``/readyz`` is ready when its caches
are synced and its last lease call went through. The port itself is the one every
role serves (``coordination.health``), which the CLI starts with these answers."""

from __future__ import annotations

from typing import Any

from tickwork.jobrunner.runner import JobRunner


async def readiness(runner: JobRunner) -> tuple[bool, dict[str, Any]]:
    """The runner's answer to ``/readyz``."""
    ready = runner.ready()
    return ready, {
        "status": "ready" if ready else "unavailable",
        "jobsSynced": runner.jobs.synced.is_set(),
        "scheduledJobsSynced": runner.scheduled_jobs.synced.is_set(),
        "leasing": runner.leasing,
        "held": len(runner.held),
    }
