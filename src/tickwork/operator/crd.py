"""The ``ScheduledJob`` CustomResourceDefinition, generated from the JobSpec model.

``spec`` is the JSON schema pydantic derives from ``JobSpec`` (the same field names,
descriptions, defaults and bounds as the HTTP API's OpenAPI document), made
structural: references inlined, ``Optional`` unwrapped, JSON Schema 2020 keywords
written the way the API server's OpenAPI v3.0 subset spells them, and
``x-kubernetes-validations`` (CEL) for the cross-field rules the model checks in
validators. What neither the schema nor CEL can check (cron syntax, IANA zones,
payload size, credentials in payloads) the admission webhook checks.

``make crds`` writes ``crds/scheduledjob.yaml`` and the Helm chart's copy
(``charts/tickwork/files/crds/scheduledjob.yaml``, which a template installs and
upgrades) with ``python -m tickwork.operator.crd``; a test fails when either is stale.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, Final

import yaml

from tickwork.core import containers
from tickwork.core.records import State
from tickwork.core.spec import JobSpec
from tickwork.engine import manifests

NAME: Final = f"{manifests.PLURAL}.{manifests.API_GROUP}"
SINGULAR: Final = "scheduledjob"
SHORT_NAME: Final = "sj"
CATEGORY: Final = "tickwork"
CONDITION_READY: Final = "Ready"
PATH: Final = Path("crds") / "scheduledjob.yaml"

# Kopf's status-based bookkeeping (its progress and diff-base storages): a real API
# server prunes whatever the schema does not declare, and a pruned diff-base would
# make Kopf handle every object again at each restart.
KOPF_FIELD: Final = "kopf"

HEADER: Final = """\
# The ScheduledJob CustomResourceDefinition of tickwork.
# Generated from the JobSpec model by `make crds`; do not edit by hand.
"""

# Keywords of pydantic's JSON schema that a structural schema keeps as they are.
_KEPT: Final = (
    "type",
    "format",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
)

# A job-runner's queue (core.containers: 'containers' or 'containers-<name>'), in CEL.
_RUNNER_QUEUE: Final = (
    f"(self.queue == '{containers.QUEUE}' || self.queue.startsWith('{containers.QUEUE}-'))"
)

# CEL rules for the checks JobSpec makes in model validators, by property path.
_RULES: Final[dict[tuple[str, ...], list[dict[str, str]]]] = {
    (): [
        {
            "rule": "!(has(self.schedule) && has(self.runAt))",
            "message": "a job has at most one of schedule and runAt",
            "fieldPath": ".runAt",
        },
        {
            "rule": f"!has(self.jobTemplate) || (has(self.queue) && {_RUNNER_QUEUE})",
            "message": "a job with jobTemplate is run by `tickwork job-runner`: set queue to "
            f"'{containers.QUEUE}' (or '{containers.QUEUE}-<name>')",
            "fieldPath": ".queue",
        },
        {
            "rule": f"has(self.jobTemplate) || !has(self.queue) || !{_RUNNER_QUEUE}",
            "message": f"{containers.QUEUE_RULE}: a job without jobTemplate cannot run there",
            "fieldPath": ".queue",
        },
    ],
    ("retry",): [
        {
            "rule": "self.maxSeconds >= self.baseSeconds",
            "message": "retry.maxSeconds must be at least retry.baseSeconds",
            "fieldPath": ".maxSeconds",
        }
    ],
}

SPEC_DESCRIPTION: Final = (
    "The job: the same fields, defaults and bounds as the JobSpec of the HTTP API "
    "(PUT /v1/jobs/{name}). The namespace is the tenant and the object's name is the "
    "job's name. At most one of schedule and runAt; with neither, the job runs only "
    "when a run is enqueued through the API."
)


def _camel_path(path: tuple[str, ...]) -> str:
    return ".".join(("spec", *path))


def _structural(
    node: dict[str, Any], defs: dict[str, Any], path: tuple[str, ...]
) -> dict[str, Any]:
    """One node of pydantic's schema as a structural schema node."""
    if path == _TEMPLATE:
        # Kubernetes' own types: kept as the API server takes them (core.containers).
        template = containers.template_schema(closed=False)
        template["description"] = _clean(template["description"])
        return template
    node = dict(node)
    description = node.pop("description", None)
    default = node.get("default")
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**target, **node}
    if "anyOf" in node:  # Optional[X]: absent is how a manifest says None
        variants = [v for v in node.pop("anyOf") if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"{_camel_path(path)}: only Optional unions map to a CRD")
        inner = variants[0]
        if "$ref" in inner:
            inner = {**defs[inner["$ref"].rsplit("/", 1)[-1]]}
        node = {**inner, **{k: v for k, v in node.items() if k != "default"}}
        if default is not None:
            node["default"] = default
    if description is None:
        description = node.get("description")
    result: dict[str, Any] = {}
    if node.get("type") == "object" or "properties" in node:
        result["type"] = "object"
        if description:
            result["description"] = _clean(description)
        properties = node.get("properties", {})
        result["properties"] = {
            name: _structural(child, defs, (*path, name)) for name, child in properties.items()
        }
        if node.get("required"):
            result["required"] = list(node["required"])
        if default is not None:
            result["default"] = default
        elif properties and all(child.get("default") is not None for child in properties.values()):
            # Every field has a default: an absent object is the all-default one, and the
            # API server fills it in, as the model does. (A field whose default is null is
            # absent: an object of such fields, schedule.dst, stays absent too.)
            result["default"] = {}
    elif not node.get("type"):  # JsonValue: any JSON at all
        if description:
            result["description"] = _clean(description)
        result["x-kubernetes-preserve-unknown-fields"] = True
    else:
        for key in _KEPT:
            if key == "description":
                if description:
                    result["description"] = _clean(description)
            elif key in node and node[key] is not None:
                result[key] = node[key]
        # JSON Schema 2020's numeric exclusive bounds, in OpenAPI v3.0's boolean form.
        for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if bound in node:
                result[plain] = node[bound]
                result[bound] = True
        if node.get("type") == "array" and "items" in node:  # unique.states
            result["items"] = _structural(node["items"], defs, (*path, "items"))
    rules = _RULES.get(path)
    if rules:
        result["x-kubernetes-validations"] = copy.deepcopy(rules)
    return result


_TEMPLATE: Final = ("jobTemplate",)


def _clean(text: str) -> str:
    """A docstring or description as one paragraph (kubectl explain wraps it)."""
    return " ".join(text.split())


def spec_schema() -> dict[str, Any]:
    model = JobSpec.model_json_schema(by_alias=True, mode="validation")
    schema = _structural(model, model.get("$defs", {}), ())
    schema["description"] = SPEC_DESCRIPTION
    # An object without spec is a job run only through the API; the defaults still show.
    schema["default"] = {}
    return schema


def _time(description: str) -> dict[str, Any]:
    return {"type": "string", "format": "date-time", "description": description}


def _count(description: str) -> dict[str, Any]:
    return {"type": "integer", "format": "int64", "minimum": 0, "description": description}


# metav1.Condition, as every built-in API and kubebuilder-made CRD declares it.
CONDITION_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "A standard condition (metav1.Condition).",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": {
            "type": "string",
            "maxLength": 316,
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            "description": "Ready: the job is stored and valid.",
        },
        "status": {
            "type": "string",
            "enum": ["True", "False", "Unknown"],
            "description": "True, False or Unknown.",
        },
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "description": "The metadata.generation the condition was set for.",
        },
        "lastTransitionTime": {
            "type": "string",
            "format": "date-time",
            "description": "When the status last changed.",
        },
        "reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            "description": "Scheduled or Paused (Ready=True); InvalidSpec or "
            "StoreUnavailable (Ready=False: needs attention).",
        },
        "message": {
            "type": "string",
            "maxLength": 32768,
            "description": "What happened, for people.",
        },
    },
}


def status_schema() -> dict[str, Any]:
    states = [state.value for state in State]
    progress_record = {
        "type": "object",
        "description": "Kopf's progress of one handler.",
        "properties": {
            "started": {"type": "string", "nullable": True},
            "stopped": {"type": "string", "nullable": True},
            "delayed": {"type": "string", "nullable": True},
            "purpose": {"type": "string", "nullable": True},
            "retries": {"type": "integer", "nullable": True},
            "success": {"type": "boolean", "nullable": True},
            "failure": {"type": "boolean", "nullable": True},
            "message": {"type": "string", "nullable": True},
            "subrefs": {"type": "array", "items": {"type": "string"}, "nullable": True},
        },
    }
    return {
        "type": "object",
        "description": "Written by the tickwork operator only: whether the job is stored "
        "and valid, and what its runs did (refreshed from the database every few seconds).",
        "properties": {
            "conditions": {
                "type": "array",
                "description": "Ready: True (reason Scheduled or Paused) when the spec is "
                "stored and valid; False (reason InvalidSpec or StoreUnavailable) when it "
                "needs attention.",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": CONDITION_SCHEMA,
            },
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "minimum": 0,
                "description": "The metadata.generation last written to the store.",
            },
            "shard": {
                "type": "integer",
                "minimum": 0,
                "description": "The shard that holds the job (a stable hash of namespace/name).",
            },
            "nextRunTime": _time(
                "Next nominal fire time (UTC); for a runAt job that instant until its run "
                "exists. Absent for paused jobs and jobs without schedule or runAt."
            ),
            "lastScheduleTime": _time("dueAt of the latest run that became ready."),
            "lastSuccessfulTime": _time("When the latest succeeded run finished."),
            "lastRunState": {
                "type": "string",
                "enum": states,
                "description": "State of the latest run: " + ", ".join(states) + ".",
            },
            "activeRuns": _count("Runs leased to a worker now."),
            "deadRuns": _count(
                "Runs in the dead-letter queue (replay or discard them through the API)."
            ),
            "missedRunsDropped": _count(
                "Missed fire times the last run_all catch-up did not insert (over its cap)."
            ),
            "overlapSkipped": _count(
                "Fires overlapPolicy Forbid skipped while an earlier run of the job was "
                "running (counted since the job was created)."
            ),
            "lastJobName": {
                "type": "string",
                "description": "A container job's (spec.jobTemplate): the name of the Job "
                "of its latest attempt, in this namespace (kubectl get job NAME).",
            },
            "pausedReason": {
                "type": "string",
                "description": "Set while tickwork keeps the job paused after "
                "spec.pauseAfterFailures consecutive dead runs (spec.paused may still say "
                "false): how many, the last dead run and its error. Resuming the job "
                "(tickwork jobs resume, the dashboard, POST /v1/jobs/{name}:resume) or "
                "changing its spec ends it.",
            },
            KOPF_FIELD: {
                "type": "object",
                "description": "The operator's own bookkeeping (Kopf): what it last "
                "handled and its handlers' progress.",
                "properties": {
                    "last-handled-configuration": {"type": "string"},
                    "dummy": {"type": "string"},
                    "progress": {"type": "object", "additionalProperties": progress_record},
                },
            },
        },
    }


PRINTER_COLUMNS: Final = [
    {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule.cron"},
    {"name": "Zone", "type": "string", "jsonPath": ".spec.schedule.timeZone"},
    {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{CONDITION_READY}")].status',
    },
    # A string, not a date: kubectl prints a future date column as <invalid>.
    {"name": "Next", "type": "string", "jsonPath": ".status.nextRunTime"},
    {"name": "Last", "type": "date", "jsonPath": ".status.lastScheduleTime"},
    {"name": "Result", "type": "string", "jsonPath": ".status.lastRunState"},
    {"name": "Job", "type": "string", "jsonPath": ".status.lastJobName"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def definition() -> dict[str, Any]:
    """The CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": NAME,
            "labels": {"app.kubernetes.io/part-of": "tickwork"},
        },
        "spec": {
            "group": manifests.API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": manifests.KIND,
                "listKind": f"{manifests.KIND}List",
                "plural": manifests.PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": manifests.API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A cron, delayed or one-off job of tickwork, "
                            "stored in its shard of PostgreSQL and run by the team's "
                            "workers, or with spec.jobTemplate as a Kubernetes Job per "
                            "attempt by tickwork job-runner. The namespace is the tenant.",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render() -> str:
    """The YAML text of ``crds/scheduledjob.yaml``."""
    body = yaml.safe_dump(
        definition(), sort_keys=False, default_flow_style=False, width=88, allow_unicode=True
    )
    return HEADER + body


def main(argv: list[str] | None = None) -> int:
    """``python -m tickwork.operator.crd [FILE ...]``: write the CRD into each FILE (to
    stdout without one)."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stdout.write(render())
        return 0
    for name in args:
        Path(name).write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
