"""What the emulated server serves: built-in resource types and those CRDs declare."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kube import schema, status

READ = ("get", "list", "watch")
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CREATE_ONLY = ("create",)

Convert = Callable[[dict[str, Any]], dict[str, Any]]


def _same(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


@dataclasses.dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    status_subresource: bool = False
    extra_subresources: tuple[str, ...] = ()
    custom: bool = False
    generation: bool = True
    unconditional_update: bool = True  # may a PUT omit metadata.resourceVersion?
    create_on_update: bool = False  # does a PUT of a missing object create it?
    openapi: dict[str, Any] | None = None  # the version's openAPIV3Schema (custom resources)
    printer_columns: tuple[dict[str, Any], ...] = ()
    selectable_fields: tuple[str, ...] = ()  # field selectors beyond metadata.name/namespace
    storage: tuple[str, str] | None = None  # (group, plural) where objects live, if shared
    to_storage: Convert = _same
    from_storage: Convert = _same

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def store_key(self) -> tuple[str, str]:
        return self.storage or (self.group, self.plural)

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def kind_group(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def supports_field(self, field: str) -> bool:
        if field in ("metadata.name", "metadata.namespace") and (
            self.namespaced or field == "metadata.name"
        ):
            return True
        return field in self.selectable_fields

    def discovery(self) -> list[dict[str, Any]]:
        entry = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        subresources = (("status",) if self.status_subresource else ()) + self.extra_subresources
        for sub in subresources:
            entries.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return entries


# --- events: core/v1 and events.k8s.io/v1 are two views of one storage -----------------

_EVENT_FIELDS = [  # (events.k8s.io/v1, core/v1)
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
]


def _event_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    renames = dict(_EVENT_FIELDS)
    return {renames.get(k, k): v for k, v in obj.items()} | {"apiVersion": "v1", "kind": "Event"}


def _event_from_core(obj: dict[str, Any]) -> dict[str, Any]:
    renames = {core: new for new, core in _EVENT_FIELDS}
    return {renames.get(k, k): v for k, v in obj.items()} | {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
    }


_CORE_EVENT_FIELDS = tuple(
    [
        f"involvedObject.{f}"
        for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    ]
    + ["reason", "reportingComponent", "source", "type"]
)
_NEW_EVENT_FIELDS = tuple(
    [
        f"regarding.{f}"
        for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    ]
    + ["reason", "reportingController", "type"]
)

_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _columns(*columns: tuple[str, str, str], age: bool = True) -> tuple[dict[str, Any], ...]:
    """A type's printer columns from (name, type, JSON path), then Age unless told not to."""
    named = tuple({"name": n, "type": t, "jsonPath": path} for n, t, path in columns)
    return (*named, _AGE) if age else named


def _built_in(
    group: str, kind: str, namespaced: bool, *short_names: str, **fields: Any
) -> ResourceType:
    """A built-in type: all are served at v1 and named after their kind, as the API server's
    own types are (lower case; the plural adds an "s")."""
    singular = kind.lower()
    return ResourceType(
        group, "v1", f"{singular}s", kind, namespaced, singular, short_names, **fields
    )


BUILT_IN: tuple[ResourceType, ...] = (
    _built_in(
        "",
        "Namespace",
        False,
        "ns",
        extra_subresources=("finalize",),
        status_subresource=True,
        generation=False,
        selectable_fields=("status.phase",),
        printer_columns=_columns(("Status", "string", ".status.phase")),
    ),
    _built_in(
        "",
        "Secret",
        True,
        generation=False,
        selectable_fields=("type",),
        printer_columns=_columns(("Type", "string", ".type")),
    ),
    _built_in("", "ConfigMap", True, "cm", generation=False),
    _built_in("", "ServiceAccount", True, "sa", generation=False),
    _built_in(
        "",
        "Event",
        True,
        "ev",
        generation=False,
        selectable_fields=_CORE_EVENT_FIELDS,
        printer_columns=_columns(
            ("Last Seen", "date", ".lastTimestamp"),
            ("Type", "string", ".type"),
            ("Reason", "string", ".reason"),
            ("Object", "string", ".involvedObject.name"),
            ("Message", "string", ".message"),
            age=False,
        ),
    ),
    _built_in(
        "events.k8s.io",
        "Event",
        True,
        "ev",
        generation=False,
        storage=("", "events"),
        to_storage=_event_to_core,
        from_storage=_event_from_core,
        selectable_fields=_NEW_EVENT_FIELDS,
    ),
    _built_in(
        "",
        "Pod",
        True,
        "po",
        categories=("all",),
        status_subresource=True,
        generation=False,
        selectable_fields=("status.phase", "spec.nodeName"),
        printer_columns=_columns(("Status", "string", ".status.phase")),
    ),
    _built_in(
        "batch",
        "Job",
        True,
        categories=("all",),
        status_subresource=True,
        selectable_fields=("status.successful",),
        printer_columns=_columns(("Status", "string", ".status.conditions[*].type")),
    ),
    _built_in(
        "coordination.k8s.io",
        "Lease",
        True,
        unconditional_update=False,
        create_on_update=True,
        generation=False,
        printer_columns=_columns(("Holder", "string", ".spec.holderIdentity")),
    ),
    _built_in(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        False,
        "crd",
        "crds",
        categories=("api-extensions",),
        status_subresource=True,
        unconditional_update=False,
        printer_columns=_columns(("Created At", "date", ".metadata.creationTimestamp"), age=False),
    ),
    _built_in(
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        False,
        categories=("api-extensions",),
        printer_columns=_columns(("Webhooks", "integer", ".webhooks[*].name")),
    ),
    _built_in(
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        False,
        categories=("api-extensions",),
    ),
    _built_in("authentication.k8s.io", "TokenReview", False, verbs=CREATE_ONLY),
    _built_in("authorization.k8s.io", "SubjectAccessReview", False, verbs=CREATE_ONLY),
    _built_in("authorization.k8s.io", "LocalSubjectAccessReview", True, verbs=CREATE_ONLY),
    _built_in("authorization.k8s.io", "SelfSubjectAccessReview", False, verbs=CREATE_ONLY),
)

REVIEWS = {
    "tokenreviews",
    "subjectaccessreviews",
    "localsubjectaccessreviews",
    "selfsubjectaccessreviews",
}


def from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of a CustomResourceDefinition."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    result = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        result.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                status_subresource="status" in subresources,
                custom=True,
                unconditional_update=False,
                openapi=((version.get("schema") or {}).get("openAPIV3Schema")),
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                selectable_fields=tuple(
                    f["jsonPath"].lstrip(".") for f in version.get("selectableFields") or ()
                ),
            )
        )
    return result


def validate_crd(crd: dict[str, Any]) -> list[status.FieldError]:
    """The checks the API server makes of a CRD (names, versions, structural schemas, CEL)."""
    errors: list[status.FieldError] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    for key in ("plural", "kind"):
        if not names.get(key):
            errors.append(status.required(f"spec.names.{key}"))
    if not group:
        errors.append(status.required("spec.group"))
    elif "." not in group:
        errors.append(
            status.invalid("spec.group", group, "should be a domain with at least one dot")
        )
    expected = f"{names.get('plural')}.{group}"
    if (crd.get("metadata") or {}).get("name") != expected:
        errors.append(
            status.invalid(
                "metadata.name",
                (crd.get("metadata") or {}).get("name"),
                'must be spec.names.plural+"."+spec.group',
            )
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(
            status.not_supported("spec.scope", spec.get("scope"), ["Cluster", "Namespaced"])
        )
    versions = spec.get("versions") or []
    if not versions:
        errors.append(
            status.required(
                "spec.versions", "must have exactly one version marked as storage version"
            )
        )
    if sum(bool(v.get("storage")) for v in versions) != 1:
        errors.append(
            status.invalid(
                "spec.versions", "array", "must have exactly one version marked as storage version"
            )
        )
    for index, version in enumerate(versions):
        path = f"spec.versions[{index}]"
        openapi = (version.get("schema") or {}).get("openAPIV3Schema")
        if openapi is None:
            errors.append(status.required(f"{path}.schema.openAPIV3Schema", "schemas are required"))
            continue
        errors.extend(schema.check_structural(openapi, f"{path}.schema.openAPIV3Schema"))
        for column_index, column in enumerate(version.get("additionalPrinterColumns") or []):
            if column.get("type") not in ("integer", "number", "string", "boolean", "date"):
                errors.append(
                    status.not_supported(
                        f"{path}.additionalPrinterColumns[{column_index}].type",
                        column.get("type"),
                        ["boolean", "date", "integer", "number", "string"],
                    )
                )
    return errors
