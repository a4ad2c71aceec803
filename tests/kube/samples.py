"""Sample objects for the emulator's own tests: a toy CRD and small built-ins."""

from __future__ import annotations

import copy
from typing import Any

GROUP = "example.dev"
WIDGETS = f"/apis/{GROUP}/v1/namespaces/default/widgets"
GADGETS = f"/apis/{GROUP}/v1/namespaces/default/gadgets"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "name": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": 3,
                    "x-kubernetes-list-type": "set",
                },
                "schedule": {"type": "object", "properties": {"cron": {"type": "string"}}},
                "runAt": {"type": "string", "format": "date-time"},
                "limits": {
                    "type": "object",
                    "properties": {
                        "low": {"type": "integer", "default": 1},
                        "high": {"type": "integer", "default": 5},
                    },
                    "x-kubernetes-validations": [
                        {"rule": "self.low <= self.high", "message": "low must not exceed high"},
                    ],
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "immutable": {
                    "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self == oldSelf", "message": "immutable is immutable"},
                    ],
                },
            },
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.schedule) && has(self.runAt))",
                    "message": "schedule and runAt are exclusive",
                },
                {
                    "rule": "!has(self.tags) || size(self.tags) < 3 || self.size > 2",
                    "messageExpression": "'size ' + string(self.size) + ' is too small for 3 tags'",
                    "fieldPath": ".tags",
                },
            ],
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string"},
                "conditions": {
                    "type": "array",
                    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
                "kopf": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
            "x-kubernetes-preserve-unknown-fields": True,
        },
    },
}

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
            "categories": ["toys"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {
                        "name": "Ready",
                        "type": "string",
                        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                    },
                    {"name": "Next", "type": "string", "jsonPath": ".status.next"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "selectableFields": [{"jsonPath": ".spec.color"}],
                "schema": {"openAPIV3Schema": WIDGET_SCHEMA},
            }
        ],
    },
}

# No status subresource, cluster-scoped: status is an ordinary field there.
GADGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"gadgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def widget(name: str, size: Any = 3, /, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size, **spec},
    }


def lease(name: str, holder: str = "a", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10, **spec},
    }


def crd(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    result = copy.deepcopy(base)
    result["spec"].update(changes)
    return result
