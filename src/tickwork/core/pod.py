"""The pod's environment: the one place a role reads who and where it runs.

Kubernetes gives a pod its name and namespace through the downward API (the chart sets
``POD_NAME`` and ``POD_NAMESPACE``), and a process outside a cluster names its cluster
with ``KUBECONFIG``. Every role (scheduler, operator, job-runner, reshard, the API's
TokenReview client) reads them here, so they agree on the defaults: an identity is the
pod's name, else ``<hostname>-<pid>``; a kubeconfig is the one given, else
``KUBECONFIG``'s first file (kubectl merges a list; tickwork reads the first, as it
names one cluster), else ``~/.kube/config`` when it exists, else none (in a pod: its
service account).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Final

DEFAULT_KUBECONFIG: Final = Path.home() / ".kube" / "config"


def identity() -> str:
    """This process's name in leases and Events: ``$POD_NAME``, else hostname-pid."""
    return os.environ.get("POD_NAME", "").strip() or f"{socket.gethostname()}-{os.getpid()}"


def namespace() -> str | None:
    """The pod's namespace (``$POD_NAMESPACE``); None outside a pod."""
    return os.environ.get("POD_NAMESPACE", "").strip() or None


def kubeconfig(given: str | Path | None = None) -> str | None:
    """The kubeconfig to load; None: the in-cluster configuration."""
    if given is not None and str(given):
        return str(given)
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    if first:
        return first
    return str(DEFAULT_KUBECONFIG) if DEFAULT_KUBECONFIG.exists() else None
