"""CEL ``x-kubernetes-validations`` rules, evaluated with cel-python.

cel-python implements standard CEL (``has()``, macros ``all``/``exists``/``map``/``filter``,
``size()``, ``matches()``, string and arithmetic operators). Kubernetes adds library
functions on top (``lowerAscii``, ``isSorted``, quantities, URLs, ...); the few the
project might use are added below, and a rule calling anything else fails to compile
when the CRD is created, loudly, instead of passing silently.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import re
from typing import Any

import celpy
from celpy import celtypes

_OLD_SELF = re.compile(r"\boldSelf\b")


def _lower(s: celtypes.StringType) -> celtypes.StringType:
    return celtypes.StringType(str(s).lower())


def _upper(s: celtypes.StringType) -> celtypes.StringType:
    return celtypes.StringType(str(s).upper())


def _trim(s: celtypes.StringType) -> celtypes.StringType:
    return celtypes.StringType(str(s).strip())


def _join(items: celtypes.ListType, sep: celtypes.StringType | None = None) -> celtypes.StringType:
    return celtypes.StringType(str(sep or "").join(str(i) for i in items))


def _split(s: celtypes.StringType, sep: celtypes.StringType) -> celtypes.ListType:
    return celtypes.ListType([celtypes.StringType(p) for p in str(s).split(str(sep))])


def _is_sorted(items: celtypes.ListType) -> celtypes.BoolType:
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(items)))


def _index_of(s: celtypes.StringType, sub: celtypes.StringType) -> celtypes.IntType:
    return celtypes.IntType(str(s).find(str(sub)))


FUNCTIONS: dict[str, Any] = {
    "lowerAscii": _lower,
    "upperAscii": _upper,
    "trim": _trim,
    "join": _join,
    "split": _split,
    "isSorted": _is_sorted,
    "indexOf": _index_of,
}


@functools.cache
def _environment() -> celpy.Environment:
    # Not celpy.CompiledRunner: faster, but it mis-evaluates `has()` inside && and ||.
    return celpy.Environment()


@functools.cache
def _program(expression: str) -> Any:
    environment = _environment()
    ast = environment.compile(expression)
    return environment.program(ast, functions=FUNCTIONS)


@dataclasses.dataclass(frozen=True)
class Rule:
    rule: str
    message: str | None = None
    message_expression: str | None = None
    reason: str = "FieldValueInvalid"
    field_path: str | None = None
    optional_old_self: bool = False

    @property
    def is_transition(self) -> bool:
        return bool(_OLD_SELF.search(self.rule))

    @classmethod
    def from_schema(cls, item: dict[str, Any]) -> Rule:
        return cls(
            rule=item["rule"],
            message=item.get("message"),
            message_expression=item.get("messageExpression"),
            reason=item.get("reason") or "FieldValueInvalid",
            field_path=item.get("fieldPath"),
            optional_old_self=bool(item.get("optionalOldSelf")),
        )


def compile_error(expression: str) -> str | None:
    """Why ``expression`` does not compile, or None (checked on CRD creation)."""
    try:
        _program(expression)
    except celpy.CELParseError as error:
        return f"compilation failed: {error}"
    except Exception as error:
        return f"compilation failed: {error}"
    unknown = _unknown_functions(expression)
    if unknown:
        return f"compilation failed: undeclared reference to {unknown!r} (not emulated)"
    return None


_KNOWN = {
    "has",
    "size",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    "matches",
    "startsWith",
    "endsWith",
    "contains",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "duration",
    "timestamp",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    "dyn",
    "in",
    *FUNCTIONS,
}


def _unknown_functions(expression: str) -> str | None:
    # cel-python resolves functions at evaluation time; catch typos and unsupported
    # Kubernetes extensions when the CRD is created rather than at the first object.
    stripped = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", expression)
    for name in re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", stripped):
        if name not in _KNOWN:
            return name
    return None


def to_cel(value: Any) -> Any:
    return celpy.json_to_cel(value)


def evaluate(rule: Rule, value: Any, old: Any) -> str | None:
    """None when the rule holds, else the message to report."""
    # cel-python walks the parse tree (milliseconds a rule); rules are pure functions of
    # their inputs, and tests apply thousands of near-identical objects: remember answers.
    try:
        key = json.dumps([value, old if rule.is_transition else None], sort_keys=True)
    except (TypeError, ValueError):
        return _evaluate(rule, value, old)
    return _remembered(rule, key)


@functools.lru_cache(maxsize=8192)
def _remembered(rule: Rule, key: str) -> str | None:
    value, old = json.loads(key)
    return _evaluate(rule, value, old)


def _evaluate(rule: Rule, value: Any, old: Any) -> str | None:
    activation: dict[str, Any] = {"self": to_cel(value)}
    if rule.is_transition:
        activation["oldSelf"] = to_cel(old)
    try:
        result = _program(rule.rule).evaluate(activation)
    except Exception as error:
        return f"{rule.rule}: evaluation error: {error}"
    if isinstance(result, celpy.CELEvalError):
        return f"{rule.rule}: evaluation error: {result.args[0] if result.args else result}"
    if not isinstance(result, celtypes.BoolType):
        return f"{rule.rule}: rule did not evaluate to a bool"
    if bool(result):
        return None
    if rule.message_expression:
        try:
            message = _program(rule.message_expression).evaluate(activation)
            if isinstance(message, str) and message.strip():
                return str(message)
        except Exception:  # a failing messageExpression falls back, as on the server
            pass
    return rule.message or f"failed rule: {rule.rule}"
