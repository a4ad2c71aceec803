"""``ScheduledJob`` manifests: YAML documents as kubectl would apply them.

``tickwork dev`` loads them from a folder; the operator receives the same objects from
the Kubernetes API. The tenant is the namespace (``default`` when absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tickwork.core.spec import JobSpec, check_name, check_tenant

API_GROUP: Final = "tickwork.dev"
API_VERSION: Final = "v1alpha1"
GROUP_VERSION: Final = f"{API_GROUP}/{API_VERSION}"  # a manifest's apiVersion
KIND: Final = "ScheduledJob"
PLURAL: Final = "scheduledjobs"
DEFAULT_NAMESPACE: Final = "default"


class ManifestError(ValueError):
    """A manifest tickwork refuses, with where it is and what is wrong.

    ``field`` names the refused field as the object writes it (``spec.schedule.cron``,
    ``metadata.name``) and ``reason`` says what is wrong with it: the operator writes
    them into the object's status, the admission webhook into its refusal.
    """

    def __init__(self, message: str, *, field: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.field = field
        self.reason = reason or message

    @property
    def detail(self) -> str:
        """``field: reason``, the way a refusal names the field."""
        return self.reason if self.field is None else f"{self.field}: {self.reason}"


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
    api_version = document.get("apiVersion")
    if api_version != GROUP_VERSION:
        reason = (
            f"must be {GROUP_VERSION} (the version the ScheduledJob CRD serves), "
            f"not {api_version!r}"
        )
        raise ManifestError(f"{source}: apiVersion {reason}", field="apiVersion", reason=reason)
    metadata = document.get("metadata") or {}
    name = metadata.get("name")
    tenant = metadata.get("namespace") or DEFAULT_NAMESPACE
    if not isinstance(name, str):
        raise ManifestError(
            f"{source}: metadata.name is required", field="metadata.name", reason="required"
        )
    for field, check, value in (
        ("metadata.name", check_name, name),
        ("metadata.namespace", check_tenant, tenant),
    ):
        try:
            check(value)
        except ValueError as error:
            raise ManifestError(f"{source}: {error}", field=field, reason=str(error)) from None
    try:
        spec = JobSpec.model_validate(document.get("spec") or {})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        field = f"spec.{where}" if where else "spec"
        raise ManifestError(
            f"{source} ({tenant}/{name}): {field}: {first['msg']}",
            field=field,
            reason=str(first["msg"]),
        ) from None
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


@dataclass(frozen=True, slots=True)
class FolderScan:
    """What each manifest file of a folder declares, file by file.

    A file is refused whole (``broken``) when any of its documents is: applying half a
    file would leave a state nobody wrote down.
    """

    declared: dict[Path, list[ScheduledJob]]
    broken: dict[Path, str]


def scan_folder(folder: Path) -> FolderScan:
    declared: dict[Path, list[ScheduledJob]] = {}
    broken: dict[Path, str] = {}
    for path in manifest_files(folder):
        try:
            declared[path] = load_file(path)
        except ManifestError as error:
            broken[path] = str(error)
    return FolderScan(declared, broken)


JobKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Declaration:
    """The job a key resolves to, and the file it comes from."""

    path: Path
    job: ScheduledJob


def resolve(
    scan: FolderScan, owners: Mapping[JobKey, Path] | None = None
) -> tuple[dict[JobKey, Declaration], list[str]]:
    """One declaration per job, and a message for every declaration refused as a
    duplicate.

    Precedence is stable: a job keeps coming from the file that declared it first
    (``owners``: the file each job came from so far), so adding a file that declares an
    existing job changes nothing but a log line. Among new declarations the first in
    path order wins. A job whose file is now broken is not resolved here (the caller
    keeps it as it was), and every other declaration of it is refused.
    """
    owners = owners or {}
    candidates: dict[JobKey, list[Declaration]] = {}
    for path, jobs in scan.declared.items():
        for job in jobs:
            candidates.setdefault((job.tenant, job.name), []).append(Declaration(path, job))
    chosen: dict[JobKey, Declaration] = {}
    refused: list[str] = []
    for key, found in candidates.items():
        owner = owners.get(key)
        if owner is not None and owner in scan.broken:
            winner, where = None, f"{owner} (refused until fixed)"
        else:
            winner = next((d for d in found if d.path == owner), found[0])
            chosen[key] = winner
            where = winner.job.source
        for declaration in found:
            if declaration is not winner:
                refused.append(
                    f"{declaration.job.source}: {key[0]}/{key[1]} is already declared in "
                    f"{where}; this declaration is ignored"
                )
    return chosen, refused


def load_folder(folder: Path) -> tuple[list[ScheduledJob], list[str]]:
    """Every ScheduledJob under ``folder`` and the errors of the files that failed.

    A bad file does not stop the others from loading.
    """
    scan = scan_folder(folder)
    chosen, refused = resolve(scan)
    return [d.job for d in chosen.values()], [*scan.broken.values(), *refused]
