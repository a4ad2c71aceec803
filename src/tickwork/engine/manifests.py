"""``ScheduledJob`` manifests: YAML documents as kubectl would apply them.

``tickwork dev`` loads them from a folder; the operator receives the same objects from
the Kubernetes API. The tenant is the namespace (``default`` when absent).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tickwork.core.spec import JobSpec, check_name, check_tenant

API_GROUP: Final = "tickwork.dev"
KIND: Final = "ScheduledJob"
DEFAULT_NAMESPACE: Final = "default"


class ManifestError(ValueError):
    """A manifest tickwork refuses, with where it is and what is wrong."""


@dataclass(frozen=True, slots=True)
class ScheduledJob:
    tenant: str
    name: str
    spec: JobSpec
    source: str


def parse_document(document: Any, source: str) -> ScheduledJob | None:
    """One YAML document; None for documents of other kinds (they are ignored)."""
    if not isinstance(document, dict) or document.get("kind") != KIND:
        return None
    api_version = str(document.get("apiVersion", ""))
    if not api_version.startswith(API_GROUP + "/"):
        raise ManifestError(f"{source}: apiVersion must be {API_GROUP}/v1, not {api_version!r}")
    metadata = document.get("metadata") or {}
    name = metadata.get("name")
    tenant = metadata.get("namespace") or DEFAULT_NAMESPACE
    if not isinstance(name, str):
        raise ManifestError(f"{source}: metadata.name is required")
    try:
        check_name(name)
        check_tenant(tenant)
    except ValueError as error:
        raise ManifestError(f"{source}: {error}") from error
    try:
        spec = JobSpec.model_validate(document.get("spec") or {})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ManifestError(f"{source} ({tenant}/{name}): spec.{where}: {first['msg']}") from error
    return ScheduledJob(tenant=tenant, name=name, spec=spec, source=source)


def load_file(path: Path) -> list[ScheduledJob]:
    try:
        documents = list(yaml.safe_load_all(path.read_text("utf-8")))
    except (OSError, yaml.YAMLError) as error:
        raise ManifestError(f"{path}: cannot read: {error}") from error
    found = []
    for index, document in enumerate(documents):
        job = parse_document(document, f"{path}#{index + 1}" if len(documents) > 1 else str(path))
        if job is not None:
            found.append(job)
    return found


def manifest_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def load_folder(folder: Path) -> tuple[list[ScheduledJob], list[str]]:
    """Every ScheduledJob under ``folder`` and the errors of the files that failed.

    A bad file does not stop the others from loading.
    """
    jobs: list[ScheduledJob] = []
    errors: list[str] = []
    for path in manifest_files(folder):
        try:
            jobs += load_file(path)
        except ManifestError as error:
            errors.append(str(error))
    return _unique(jobs, errors), errors


def _unique(jobs: Iterable[ScheduledJob], errors: list[str]) -> list[ScheduledJob]:
    seen: dict[tuple[str, str], ScheduledJob] = {}
    for job in jobs:
        key = (job.tenant, job.name)
        if key in seen:
            errors.append(
                f"{job.source}: {job.tenant}/{job.name} is also declared in {seen[key].source}"
            )
            continue
        seen[key] = job
    return list(seen.values())
