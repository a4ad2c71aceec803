"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902, ``jsonpatch``)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer

from kube import status

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def apply(content_type: str, target: dict[str, Any], body: Any, *, custom: bool) -> dict[str, Any]:
    """The patched object, or the error the API server would answer."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        if not isinstance(body, list):
            raise status.bad_request(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
            )
        try:
            result = jsonpatch.JsonPatch(body).apply(copy.deepcopy(target))
        except jsonpatch.JsonPatchTestFailed as error:
            # The real server answers 422 for a failed "test": Kopf relies on it to retry.
            raise status.ApiError(
                422, f"the server rejected our request due to an error in our request: {error}"
            ) from error
        except (jsonpatch.JsonPatchConflict, jsonpointer.JsonPointerException) as error:
            raise status.ApiError(
                422, f"the server rejected our request due to an error in our request: {error}"
            ) from error
        except (jsonpatch.InvalidJsonPatch, TypeError, KeyError) as error:
            raise status.bad_request(f"invalid JSON patch: {error}") from error
        if not isinstance(result, dict):
            raise status.ApiError(422, "the patched object is not a JSON object")
        return result
    if kind == MERGE_PATCH or (kind == STRATEGIC_MERGE_PATCH and not custom):
        if not isinstance(body, dict):
            raise status.bad_request("a merge patch must be a JSON object")
        return merge(target, body)
    if kind == APPLY_PATCH:
        raise status.ApiError(415, "server-side apply is not emulated: use a merge or JSON patch")
    accepted = (
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )
    if not custom:
        accepted += ", application/strategic-merge-patch+json"
    raise status.ApiError(
        415,
        "the body of the request was in an unknown format - "
        f"accepted media types include: {accepted}",
    )
