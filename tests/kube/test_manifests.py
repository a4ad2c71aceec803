"""The offline manifest check (kubernetes-validate) tests can call on shipped files."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kube import manifests, samples


def test_a_valid_crd_passes_for_the_oldest_and_newest_versions(tmp_path: Path) -> None:
    portable = copy.deepcopy(samples.WIDGET_CRD)
    del portable["spec"]["versions"][0]["selectableFields"]
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump_all([portable, samples.GADGET_CRD]))
    assert manifests.validate_file(path) == 2


def test_a_field_newer_than_the_oldest_supported_version_is_reported() -> None:
    manifests.validate(samples.WIDGET_CRD, manifests.NEWEST_SUPPORTED)
    with pytest.raises(kubernetes_validate.ValidationError, match="selectableFields"):
        manifests.validate(samples.WIDGET_CRD, manifests.OLDEST_SUPPORTED)


def test_unknown_or_mistyped_fields_are_reported() -> None:
    typo = copy.deepcopy(samples.WIDGET_CRD)
    typo["spec"]["versions"][0]["servd"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        manifests.validate(typo)
    mistyped = copy.deepcopy(samples.WIDGET_CRD)
    mistyped["spec"]["versions"][0]["served"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        manifests.validate(mistyped, manifests.OLDEST_SUPPORTED)
