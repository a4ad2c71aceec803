"""The pod's environment, read in one place (core.pod) by every role: the identity, the
namespace and the kubeconfig each role would use, from the same variables."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tickwork.coordination import choice
from tickwork.core import pod
from tickwork.jobrunner.settings import default_identity


@pytest.fixture(autouse=True)
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("POD_NAME", "POD_NAMESPACE", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pod, "DEFAULT_KUBECONFIG", tmp_path / "absent")


def test_outside_a_pod_every_role_names_itself_hostname_pid() -> None:
    expected = f"{socket.gethostname()}-{os.getpid()}"
    assert pod.identity() == choice.default_identity() == default_identity() == expected
    assert pod.namespace() is None and choice.default_namespace() == "tickwork"
    assert pod.kubeconfig() is None  # the in-cluster configuration


def test_in_a_pod_every_role_takes_the_pods_name_and_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAME", "tickwork-scheduler-7d9f-x2")
    monkeypatch.setenv("POD_NAMESPACE", " jobs ")
    assert pod.identity() == choice.default_identity() == default_identity()
    assert pod.identity() == "tickwork-scheduler-7d9f-x2"
    assert pod.namespace() == choice.default_namespace() == "jobs"


def test_the_kubeconfig_is_the_given_one_else_kubeconfigs_first_else_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first, second, default = tmp_path / "a", tmp_path / "b", tmp_path / "config"
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    assert pod.kubeconfig(tmp_path / "given") == str(tmp_path / "given")
    assert pod.kubeconfig() == str(first)
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setattr(pod, "DEFAULT_KUBECONFIG", default)
    assert pod.kubeconfig() is None
    default.write_text("apiVersion: v1\n")
    assert pod.kubeconfig() == str(default)
