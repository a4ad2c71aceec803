"""make e2e without a cluster here: the script is shellcheck-clean, explains what is
missing and exits 2, and its checker needs nothing but the standard library."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "e2e" / "run.sh"


def test_the_script_is_shellcheck_clean() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    result = subprocess.run(
        [str(shellcheck), "--severity=style", str(SCRIPT)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_without_kind_it_explains_and_exits_2(tmp_path: Path) -> None:
    # A PATH with bash and the basics but none of docker, kind, helm.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "env"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    result = subprocess.run(
        [str(bin_dir / "bash"), str(SCRIPT)],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "make e2e needs docker kind kubectl helm" in result.stderr
    assert "nothing was run" in result.stderr


def test_the_checker_uses_only_the_standard_library() -> None:
    tree = ast.parse((ROOT / "e2e" / "check.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported


def test_the_worker_manifest_is_valid_kubernetes() -> None:
    from kube import manifests

    text = (ROOT / "e2e" / "worker.yaml").read_text()
    text = text.replace("IMAGE", "tickwork:e2e").replace("DISPATCHER", "http://tw.tickwork.svc")
    for document in yaml.safe_load_all(text):
        for version in (manifests.OLDEST_SUPPORTED, manifests.NEWEST_SUPPORTED):
            manifests.validate(document, version)
    assert os.access(SCRIPT, os.X_OK)
