"""``ScheduledJob`` manifests: YAML documents as kubectl would apply them.

``tickwork dev`` loads them from a folder; the operator receives the same objects from
the Kubernetes API. The tenant is the namespace (``default`` when absent).

A file is untrusted input: whatever it holds (a folder name for a zone, a payload
nested hundreds deep, a binary file, a YAML alias bomb, a 2 GB file) it is refused
with a ``ManifestError`` that names the file and the field, and the other files load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from tickwork.core import limits
from tickwork.core import spec as spec_module
from tickwork.core.spec import JobSpec, check_name, check_tenant

API_GROUP: Final = "tickwork.dev"
API_VERSION: Final = "v1alpha1"
GROUP_VERSION: Final = f"{API_GROUP}/{API_VERSION}"  # a manifest's apiVersion
KIND: Final = "ScheduledJob"
PLURAL: Final = "scheduledjobs"
DEFAULT_NAMESPACE: Final = "default"

# libyaml when the wheel has it: the pure-Python parser is slow on deep or large input.
_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPENS: Final = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES: Final = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


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


def _spec_field(error: Mapping[str, Any]) -> str:
    field = spec_module.error_field(error)
    return "spec" if field is None else f"spec.{field}"


def parse_document(document: Any, source: str) -> ScheduledJob | None:
    """One YAML document; None for documents of other kinds (they are ignored)."""
    if not isinstance(document, dict) or document.get("kind") != KIND:
        return None
    api_version = document.get("apiVersion")
    if api_version != GROUP_VERSION:
        shown = spec_module.shown(api_version) if isinstance(api_version, str) else "not text"
        reason = f"must be {GROUP_VERSION} (the version the ScheduledJob CRD serves), not {shown}"
        raise ManifestError(f"{source}: apiVersion {reason}", field="apiVersion", reason=reason)
    metadata = document.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ManifestError(
            f"{source}: metadata must be a mapping", field="metadata", reason="must be a mapping"
        )
    name = metadata.get("name")
    tenant = metadata.get("namespace") or DEFAULT_NAMESPACE
    if not isinstance(name, str):
        raise ManifestError(
            f"{source}: metadata.name is required (a string)",
            field="metadata.name",
            reason="required (a string)",
        )
    for field, check, value in (
        ("metadata.name", check_name, name),
        ("metadata.namespace", check_tenant, tenant),
    ):
        try:
            check(value)
        except ValueError as error:
            raise ManifestError(
                f"{source}: {field}: {error}", field=field, reason=str(error)
            ) from None
    document_spec = document.get("spec")
    if document_spec is None:
        document_spec = {}
    if not isinstance(document_spec, dict):
        raise ManifestError(
            f"{source} ({tenant}/{name}): spec: must be a mapping",
            field="spec",
            reason="must be a mapping",
        )
    try:
        # camelCase only, no coercion: what the CRD's schema accepts.
        spec = spec_module.parse(JobSpec, document_spec)
    except ValidationError as error:
        first = error.errors()[0]
        field = _spec_field(first)
        reason = spec_module.error_message(first)
        raise ManifestError(
            f"{source} ({tenant}/{name}): {field}: {reason}", field=field, reason=reason
        ) from None
    return ScheduledJob(tenant=tenant, name=name, spec=spec, source=source)


@dataclass(slots=True)
class _Frame:
    """An open mapping (``key``: the key being read or valued) or sequence (``index``)."""

    mapping: bool
    key: str | None = None
    index: int = 0
    expecting_key: bool = True

    def step(self) -> str | int | None:
        return self.key if self.mapping else self.index

    def completed(self) -> None:
        """One node of this container is complete: a key, a value or an item."""
        if self.mapping:
            self.expecting_key = not self.expecting_key
        else:
            self.index += 1


def _too_deep(text: str) -> str | None:
    """The field of the first node nested deeper than a request body may be, found from
    the parser's events (no recursion, and it stops there) before anything composes the
    document: ``spec.payload`` for a payload nested 300 deep. Bounded by the file size
    (``limits.MAX_MANIFEST_BYTES``)."""
    try:
        return _too_deep_with(text, _LOADER)
    except yaml.YAMLError:
        if _LOADER is yaml.SafeLoader:
            return None  # the load that follows reports it
    # libyaml reads far ahead and gives up past 1000 levels before its events show
    # where; the Python parser, slower, shows them.
    try:
        return _too_deep_with(text, yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def _too_deep_with(text: str, loader: Any) -> str | None:
    frames: list[_Frame] = []
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, _OPENS):
            if len(frames) >= limits.MAX_BODY_DEPTH:
                return _field_of([frame.step() for frame in frames])
            if frames and frames[-1].mapping and frames[-1].expecting_key:
                frames[-1].key = None  # a complex key: no name to give
            frames.append(_Frame(mapping=isinstance(event, yaml.MappingStartEvent)))
        elif isinstance(event, _CLOSES):
            frames.pop()
            if frames:
                frames[-1].completed()
        elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent) and frames:
            top = frames[-1]
            if top.mapping and top.expecting_key:
                top.key = event.value if isinstance(event, yaml.ScalarEvent) else None
            top.completed()
    return None


def _field_of(path: list[str | int | None]) -> str:
    """Down to the payload, else the first two steps (``spec.schedule``)."""
    steps = path[: path.index("payload") + 1] if "payload" in path else path[:2]
    text = ""
    for step in steps:
        if isinstance(step, int):
            text += f"[{step}]"
        elif step is not None:
            text += ("." if text else "") + step
    return text or "document"


def load_file(path: Path) -> list[ScheduledJob]:
    try:
        with path.open("rb") as stream:
            raw = stream.read(limits.MAX_MANIFEST_BYTES + 1)
    except OSError as error:
        raise ManifestError(f"{path}: cannot read: {error}") from None
    if len(raw) > limits.MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{path}: larger than {limits.MAX_MANIFEST_BYTES} bytes; split it into several files"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ManifestError(f"{path}: not UTF-8 text: {error}") from None
    deep = _too_deep(text)
    if deep is not None:
        raise ManifestError(
            f"{path}: {deep}: JSON nests deeper than allowed (a payload at most "
            f"{limits.MAX_JSON_DEPTH} levels of arrays and objects, a manifest at most "
            f"{limits.MAX_BODY_DEPTH})"
        )
    try:
        documents = list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: cannot read: {error}") from None
    except RecursionError:  # pragma: no cover - the depth scan above stops these first
        raise ManifestError(f"{path}: cannot read: nests too deep") from None
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
