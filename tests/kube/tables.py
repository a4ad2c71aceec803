"""``meta.k8s.io/v1`` Table answers, which ``kubectl get`` asks for to print columns."""

from __future__ import annotations

import datetime
import json
from typing import Any

from kube import jsonpath
from kube.resources import ResourceType

_NAME = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace. "
    "More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "priority": 0,
}
_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def wants_table(accept: str) -> str | None:
    """The Table version asked for in an Accept header (``v1``/``v1beta1``), if any."""
    for part in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in part.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return params.get("v", "v1")
    return None


def _columns(rt: ResourceType) -> list[dict[str, Any]]:
    if rt.printer_columns:
        return list(rt.printer_columns)
    return [_AGE]


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: what kubectl shows in AGE-like columns."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y{rest}d" if rest else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _date(value: Any, now: datetime.datetime) -> str:
    # The server turns dates into ages itself (apiextensions' table convertor), which is
    # why a future instant prints as "<invalid>".
    if not isinstance(value, str):
        return "<unknown>"
    try:
        instant = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=datetime.UTC)
    return human_duration((now - instant).total_seconds())


def _cell(column: dict[str, Any], obj: dict[str, Any], now: datetime.datetime) -> Any:
    try:
        found = jsonpath.find(obj, column.get("jsonPath", ""))
    except ValueError:
        return None
    if not found:
        return None
    kind = column.get("type", "string")
    if kind == "integer" and "[*]" in column.get("jsonPath", ""):
        return len(found)  # kubectl's WEBHOOKS column: how many there are
    value = found[0]
    if kind == "string":
        return value if isinstance(value, str) else _as_string(value)
    if kind == "integer":
        return (
            int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        )
    if kind == "number":
        return (
            float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else None
        )
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    return _date(value, now)


def _as_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def table(
    rt: ResourceType,
    objects: list[dict[str, Any]],
    version: str,
    list_meta: dict[str, Any],
    include: str,
    now: datetime.datetime,
) -> dict[str, Any]:
    columns = _columns(rt)
    definitions = [_NAME] + [
        {
            "name": c["name"],
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "description": c.get("description", ""),
            "priority": c.get("priority", 0),
        }
        for c in columns
    ]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {
            "cells": [obj["metadata"]["name"]] + [_cell(c, obj, now) for c in columns]
        }
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": f"meta.k8s.io/{version}",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    }
