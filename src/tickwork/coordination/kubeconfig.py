"""Which Kubernetes API a process talks to, and as whom: the one place every role
loads its client configuration (the scheduler's Leases, the operator, its leader
election).

Which file is read is ``core.pod.kubeconfig``'s choice (the one given, else
``KUBECONFIG``'s first file, else ``~/.kube/config``; without any, the pod's service
account). Loaded anew on every call, so a caller that asks again (Kopf's login, after
a token rotated) gets fresh credentials. The job-runner and the API's TokenReview
client load theirs here too.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes_asyncio import client, config

from tickwork.core import pod


class KubeconfigError(Exception):
    """The Kubernetes client configuration could not be loaded."""


async def load_configuration(kubeconfig: str | Path | None = None) -> client.Configuration:
    """A client configuration for ``pod.kubeconfig(kubeconfig)``."""
    path = pod.kubeconfig(kubeconfig)
    if path is not None and not os.path.isfile(path):  # noqa: ASYNC240 - a stat, at start-up
        raise KubeconfigError(f"cannot load the kubeconfig {path}: no such file")
    configuration = client.Configuration()
    try:
        if path is not None:
            await config.load_kube_config(
                config_file=path, client_configuration=configuration, persist_config=False
            )
        else:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
    except (config.ConfigException, OSError) as error:
        where = f"kubeconfig {path}" if path else "in-cluster configuration"
        raise KubeconfigError(f"cannot load the {where}: {error}") from error
    return configuration
