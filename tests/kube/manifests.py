"""Offline validation of manifests against the Kubernetes OpenAPI schemas
(``kubernetes-validate``), for CRDs and anything else the project ships."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

OLDEST_SUPPORTED = "1.28.0"
NEWEST_SUPPORTED = "1.33.0"


def validate(
    manifest: dict[str, Any], version: str = NEWEST_SUPPORTED, *, strict: bool = True
) -> None:
    """Raise ``kubernetes_validate.ValidationError`` if ``manifest`` is not valid for
    Kubernetes ``version`` (strict: unknown fields are errors too)."""
    kubernetes_validate.validate(manifest, version, strict)


def validate_file(
    path: Path, versions: tuple[str, ...] = (OLDEST_SUPPORTED, NEWEST_SUPPORTED)
) -> int:
    """Validate every document of a YAML file for each version; returns how many."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for document in documents:
        for version in versions:
            validate(document, version)
    return len(documents)
