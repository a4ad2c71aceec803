"""Which Kubernetes API a process talks to, and as whom: the one place every role
loads its client configuration (the scheduler's Leases, the operator, its leader
election).

The kubeconfig given (``--kubeconfig``), else ``KUBECONFIG``'s first file, else
``~/.kube/config`` if it exists; without any, the pod's service account (in-cluster
configuration). Loaded anew on every call, so a caller that asks again (Kopf's login,
after a token rotated) gets fresh credentials.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from kubernetes_asyncio import client, config

DEFAULT_KUBECONFIG: Final = Path.home() / ".kube" / "config"


class KubeconfigError(Exception):
    """The Kubernetes client configuration could not be loaded."""


def kubeconfig_path(given: str | None = None) -> str | None:
    """The kubeconfig to use; None: the in-cluster configuration."""
    path = given or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    if path is None and DEFAULT_KUBECONFIG.exists():
        path = str(DEFAULT_KUBECONFIG)
    return path


async def load_configuration(kubeconfig: str | None = None) -> client.Configuration:
    """A client configuration for ``kubeconfig_path(kubeconfig)``."""
    path = kubeconfig_path(kubeconfig)
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
