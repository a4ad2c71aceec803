"""Structural OpenAPI v3 schemas of custom resources: pruning, defaulting, validation.

Follows the apiextensions-apiserver order: unknown fields are pruned (metadata is
pruned to ``ObjectMeta``), defaults are applied, then the object is validated against
the schema and its CEL rules; messages use the server's wording so tests can assert on
``details.causes[].field`` and on what ``kubectl`` would print.
"""

from __future__ import annotations

import copy
import datetime
import math
import re
from typing import Any

from kube import cel, status

MISSING: Any = object()

OBJECT_META_FIELDS = {
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --- pruning and defaulting ----------------------------------------------------------


def prune_object(schema: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """The object with every field the schema does not declare removed (root level:
    ``apiVersion``, ``kind`` and ``metadata`` always stay)."""
    result: dict[str, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            result[key] = value
        elif key == "metadata":
            result[key] = {k: v for k, v in (value or {}).items() if k in OBJECT_META_FIELDS}
    body = prune(
        schema, {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    )
    result.update(body)
    return result


def prune(schema: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict):
        if schema.get("x-kubernetes-embedded-resource"):
            kept = {k: value[k] for k in ("apiVersion", "kind") if k in value}
            if "metadata" in value:
                kept["metadata"] = {
                    k: v for k, v in (value["metadata"] or {}).items() if k in OBJECT_META_FIELDS
                }
            rest = {k: v for k, v in value.items() if k not in ("apiVersion", "kind", "metadata")}
            kept.update(_prune_properties(schema, rest))
            return kept
        return _prune_properties(schema, value)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(schema["items"], item) for item in value]
    return value


def _prune_properties(schema: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    result: dict[str, Any] = {}
    for key, item in value.items():
        if key in properties:
            result[key] = prune(properties[key], item)
        elif isinstance(additional, dict):
            result[key] = prune(additional, item)
        elif preserve or additional is True:
            result[key] = item
    return result


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Fill in ``default`` for absent fields (and for nulls where null is not allowed)."""
    if isinstance(value, dict):
        properties: dict[str, Any] = schema.get("properties") or {}
        for key, sub in properties.items():
            if "default" in sub and (
                key not in value or (value[key] is None and not sub.get("nullable"))
            ):
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key in list(value):
                if key not in properties:
                    value[key] = apply_defaults(additional, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


# --- validation ----------------------------------------------------------------------

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _format_ok(fmt: str, value: str) -> bool:
    if fmt == "date-time":
        try:
            datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return False
        return "T" in value or " " in value
    if fmt == "date":
        return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value))
    if fmt == "uuid":
        return bool(re.fullmatch(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}", value))
    if fmt == "byte":
        return bool(re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", value)) and len(value) % 4 == 0
    return True


def validate(
    schema: dict[str, Any], value: Any, path: str = "", old: Any = MISSING
) -> list[status.FieldError]:
    """Every violation of ``schema`` (and its CEL rules, with ``old`` as ``oldSelf``)."""
    errors: list[status.FieldError] = []
    _validate(schema, value, path, old, errors)
    return errors


def _validate(
    schema: dict[str, Any], value: Any, path: str, old: Any, errors: list[status.FieldError]
) -> None:
    shown = path or "<root>"
    if value is None and schema.get("nullable"):
        return
    expected = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, (int, str)) and not isinstance(value, bool)):
            errors.append(
                status.type_invalid(
                    path,
                    json_type(value),
                    f"{shown} in body must be of type int-or-string: "
                    f"{status.show(json_type(value))}",
                )
            )
            return
    elif expected and not _TYPES[expected](value):
        actual = json_type(value)
        errors.append(
            status.type_invalid(
                path, actual, f"{shown} in body must be of type {expected}: {status.show(actual)}"
            )
        )
        return
    before = len(errors)
    if "enum" in schema and value not in schema["enum"]:
        errors.append(status.not_supported(path, value, schema["enum"]))
    if isinstance(value, str):
        _validate_string(schema, value, path, shown, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(schema, value, path, shown, errors)
    elif isinstance(value, list):
        _validate_array(schema, value, path, shown, old, errors)
    elif isinstance(value, dict):
        _validate_object(schema, value, path, shown, old, errors)
    for keyword in ("allOf", "anyOf", "oneOf", "not"):
        if keyword in schema:
            _validate_combinator(keyword, schema[keyword], value, path, shown, errors)
    if len(errors) == before:
        _validate_rules(schema, value, path, old, errors)


def _validate_string(
    schema: dict[str, Any], value: str, path: str, shown: str, errors: list[status.FieldError]
) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(status.too_long(path, schema["maxLength"]))
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(
            status.invalid(
                path, value, f"{shown} in body should be at least {schema['minLength']} chars long"
            )
        )
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append(
            status.invalid(path, value, f"{shown} in body should match '{schema['pattern']}'")
        )
    fmt = schema.get("format")
    if fmt and not _format_ok(fmt, value):
        errors.append(
            status.invalid(
                path, value, f"{shown} in body must be of type {fmt}: {status.show(value)}"
            )
        )


def _validate_number(
    schema: dict[str, Any], value: float, path: str, shown: str, errors: list[status.FieldError]
) -> None:
    if "maximum" in schema:
        if schema.get("exclusiveMaximum") and value >= schema["maximum"]:
            errors.append(
                status.invalid(
                    path, value, f"{shown} in body should be less than {schema['maximum']}"
                )
            )
        elif value > schema["maximum"]:
            errors.append(
                status.invalid(
                    path,
                    value,
                    f"{shown} in body should be less than or equal to {schema['maximum']}",
                )
            )
    if "minimum" in schema:
        if schema.get("exclusiveMinimum") and value <= schema["minimum"]:
            errors.append(
                status.invalid(
                    path, value, f"{shown} in body should be greater than {schema['minimum']}"
                )
            )
        elif value < schema["minimum"]:
            errors.append(
                status.invalid(
                    path,
                    value,
                    f"{shown} in body should be greater than or equal to {schema['minimum']}",
                )
            )
    if "multipleOf" in schema and not math.isclose(
        value / schema["multipleOf"], round(value / schema["multipleOf"])
    ):
        errors.append(
            status.invalid(
                path, value, f"{shown} in body should be a multiple of {schema['multipleOf']}"
            )
        )


def _validate_array(
    schema: dict[str, Any],
    value: list[Any],
    path: str,
    shown: str,
    old: Any,
    errors: list[status.FieldError],
) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(status.too_many(path, len(value), schema["maxItems"]))
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            status.invalid(
                path, len(value), f"{shown} in body should have at least {schema['minItems']} items"
            )
        )
    list_type = schema.get("x-kubernetes-list-type")
    keys: list[str] = schema.get("x-kubernetes-list-map-keys") or []
    seen: list[Any] = []
    old_by_key: dict[Any, Any] = {}
    if list_type == "map" and isinstance(old, list):
        old_by_key = {_map_key(item, keys): item for item in old if isinstance(item, dict)}
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        if list_type in ("set", "map"):
            identity = _map_key(item, keys) if list_type == "map" else item
            if identity in seen:
                errors.append(
                    status.duplicate(
                        item_path,
                        item if list_type == "set" else dict(zip(keys, identity, strict=False)),
                    )
                )
            seen.append(identity)
        if isinstance(schema.get("items"), dict):
            item_old = (
                old_by_key.get(_map_key(item, keys), MISSING) if list_type == "map" else MISSING
            )
            _validate(schema["items"], item, item_path, item_old, errors)


def _map_key(item: Any, keys: list[str]) -> Any:
    if not isinstance(item, dict):
        return (repr(item),)
    return tuple(repr(item.get(k)) for k in keys)


def _validate_object(
    schema: dict[str, Any],
    value: dict[str, Any],
    path: str,
    shown: str,
    old: Any,
    errors: list[status.FieldError],
) -> None:
    for key in schema.get("required") or []:
        if key not in value:
            errors.append(status.required(_join(path, key)))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(status.too_many(path, len(value), schema["maxProperties"]))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(
            status.invalid(
                path,
                len(value),
                f"{shown} in body should have at least {schema['minProperties']} properties",
            )
        )
    properties: dict[str, Any] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    old_map = old if isinstance(old, dict) else {}
    for key, item in value.items():
        sub = properties.get(key, additional if isinstance(additional, dict) else None)
        if sub is not None and not (path == "" and key in ("apiVersion", "kind", "metadata")):
            _validate(sub, item, _join(path, key), old_map.get(key, MISSING), errors)


def _validate_combinator(
    keyword: str, subs: Any, value: Any, path: str, shown: str, errors: list[status.FieldError]
) -> None:
    def ok(sub: dict[str, Any]) -> bool:
        return not validate(sub, value, path)

    if keyword == "allOf":
        for sub in subs:
            errors.extend(validate(sub, value, path))
    elif keyword == "anyOf" and not any(ok(s) for s in subs):
        errors.append(
            status.invalid(path, value, f'"{shown}" must validate at least one schema (anyOf)')
        )
    elif keyword == "oneOf" and sum(ok(s) for s in subs) != 1:
        errors.append(
            status.invalid(path, value, f'"{shown}" must validate one and only one schema (oneOf)')
        )
    elif keyword == "not" and ok(subs):
        errors.append(status.invalid(path, value, f'"{shown}" must not validate the schema (not)'))


def _validate_rules(
    schema: dict[str, Any], value: Any, path: str, old: Any, errors: list[status.FieldError]
) -> None:
    for item in schema.get("x-kubernetes-validations") or []:
        rule = cel.Rule.from_schema(item)
        if rule.is_transition and old is MISSING and not rule.optional_old_self:
            continue  # transition rules only judge updates of a value that existed
        message = cel.evaluate(rule, value, None if old is MISSING else old)
        if message is None:
            continue
        field = path
        if rule.field_path:
            field = path + (
                rule.field_path if rule.field_path.startswith((".", "[")) else "." + rule.field_path
            )
            field = field.lstrip(".")
        shown_type = schema.get("type") or json_type(value)
        if rule.reason == "FieldValueRequired":
            errors.append(status.required(field, message))
        elif rule.reason == "FieldValueForbidden":
            errors.append(status.forbidden(field, message))
        elif rule.reason == "FieldValueDuplicate":
            errors.append(
                status.FieldError(field, "FieldValueDuplicate", f"Duplicate value: {message}")
            )
        else:
            errors.append(
                status.FieldError(
                    field, "FieldValueInvalid", f'Invalid value: "{shown_type}": {message}'
                )
            )


# --- checks of a CRD's schema when the CRD is created ---------------------------------


def check_structural(schema: Any, path: str) -> list[status.FieldError]:
    """The structural-schema rules an API server enforces, and CEL rules that compile."""
    errors: list[status.FieldError] = []
    if not isinstance(schema, dict):
        return [status.required(path)]
    _check_node(schema, path, errors, root=True)
    return errors


def _check_node(
    node: dict[str, Any], path: str, errors: list[status.FieldError], root: bool = False
) -> None:
    if root and node.get("type") != "object":
        errors.append(status.required(_join(path, "type"), 'must be "object" at the root'))
    has_type = "type" in node
    special = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if not has_type and not special:
        errors.append(
            status.required(_join(path, "type"), "must not be empty for specified object fields")
        )
    if node.get("type") == "array" and not isinstance(node.get("items"), dict):
        errors.append(status.required(_join(path, "items"), "must be specified"))
    if "properties" in node and isinstance(node.get("additionalProperties"), dict):
        errors.append(
            status.forbidden(
                _join(path, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            )
        )
    for index, item in enumerate(node.get("x-kubernetes-validations") or []):
        problem = cel.compile_error(item.get("rule", ""))
        if problem:
            errors.append(
                status.invalid(
                    f"{_join(path, 'x-kubernetes-validations')}[{index}].rule",
                    item.get("rule"),
                    problem,
                )
            )
    for key, sub in (node.get("properties") or {}).items():
        if isinstance(sub, dict):
            _check_node(sub, f"{_join(path, 'properties')}[{key}]", errors)
    if isinstance(node.get("items"), dict):
        _check_node(node["items"], _join(path, "items"), errors)
    if isinstance(node.get("additionalProperties"), dict):
        _check_node(node["additionalProperties"], _join(path, "additionalProperties"), errors)
