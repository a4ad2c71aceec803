"""The JSONPath subset Kubernetes uses in ``additionalPrinterColumns`` and
``selectableFields``: ``.a.b``, ``['a.b']``, ``[0]``, ``[*]``, ``[?(@.type=="Ready")]``."""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_$-]+)
      | \[\s*'(?P<quoted>[^']*)'\s*\]
      | \[\s*"(?P<dquoted>[^"]*)"\s*\]
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*(?P<star>\*)\s*\]
      | \.(?P<dotstar>\*)
      | \[\s*\?\(\s*@(?P<fpath>(?:\.[A-Za-z0-9_-]+)+)\s*(?P<fop>==|!=)\s*
        (?P<fvalue>"[^"]*"|'[^']*'|[^)\s]+)\s*\)\s*\]
    """,
    re.VERBOSE,
)


def _literal(text: str) -> Any:
    if text[0] in "'\"":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def find(data: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``data`` (``{.a}`` braces are allowed)."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path in ("", "."):
        return [data]
    current = [data]
    position = 0
    while position < len(path):
        match = _TOKEN.match(path, position)
        if not match:
            raise ValueError(f"unsupported JSONPath {path!r} at {path[position:]!r}")
        position = match.end()
        following: list[Any] = []
        for item in current:
            key = match["name"] or match["quoted"] or match["dquoted"]
            if key is not None:
                if isinstance(item, dict) and key in item:
                    following.append(item[key])
            elif match["index"] is not None:
                index = int(match["index"])
                if isinstance(item, list) and -len(item) <= index < len(item):
                    following.append(item[index])
            elif match["star"] or match["dotstar"]:
                if isinstance(item, list):
                    following.extend(item)
                elif isinstance(item, dict):
                    following.extend(item.values())
            else:
                wanted = _literal(match["fvalue"])
                keys = match["fpath"].strip(".").split(".")
                for element in item if isinstance(item, list) else []:
                    value: Any = element
                    for part in keys:
                        value = value.get(part) if isinstance(value, dict) else None
                    if (value == wanted) == (match["fop"] == "=="):
                        following.append(element)
        current = following
    return current


def dotted(data: Any, path: str) -> Any:
    """``a.b.c`` looked up in nested dicts, or None."""
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data
