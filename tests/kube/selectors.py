"""Label and field selectors: the query-string grammar and the ``LabelSelector`` object."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from kube import status

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[-A-Za-z0-9_.]*"
_REQUIREMENT = re.compile(
    rf"""\s*(?:
        (?P<not>!)\s*(?P<nkey>{_KEY})                                     # !key
      | (?P<skey>{_KEY})\s*(?P<setop>in|notin)\s*\((?P<values>[^)]*)\)    # key in (a, b)
      | (?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})           # key = value
      | (?P<ekey>{_KEY})                                                  # key
    )\s*(?:,|$)""",
    re.VERBOSE,
)


@dataclasses.dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator == "=":
            return value == self.values[0]
        if self.operator == "!=":
            return value != self.values[0]
        if self.operator == "in":
            return present and value in self.values
        return not present or value not in self.values  # notin


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return all(r.matches(labels or {}) for r in self.requirements)


def parse_labels(text: str | None) -> LabelSelector:
    """``?labelSelector=`` as the API server parses it; a syntax error is a 400."""
    if not text or not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    position = 0
    while position < len(text):
        match = _REQUIREMENT.match(text, position)
        if not match or match.end() == position:
            raise status.bad_request(f"unable to parse requirement: {text[position:]!r}")
        position = match.end()
        if match["nkey"]:
            requirements.append(Requirement(match["nkey"], "!"))
        elif match["skey"]:
            values = tuple(v.strip() for v in match["values"].split(",") if v.strip())
            requirements.append(Requirement(match["skey"], match["setop"], values))
        elif match["key"]:
            op = "=" if match["op"] in ("=", "==") else "!="
            requirements.append(Requirement(match["key"], op, (match["value"],)))
        else:
            requirements.append(Requirement(match["ekey"], "exists"))
    return LabelSelector(tuple(requirements))


def from_object(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` (``matchLabels``/``matchExpressions``); None matches all."""
    if not selector:
        return LabelSelector()
    requirements = [
        Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expression in selector.get("matchExpressions") or []:
        operator = operators.get(expression.get("operator", ""))
        if operator is None:
            raise status.bad_request(
                f"{expression.get('operator')!r} is not a valid selector operator"
            )
        requirements.append(
            Requirement(expression["key"], operator, tuple(expression.get("values") or ()))
        )
    return LabelSelector(tuple(requirements))


@dataclasses.dataclass(frozen=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    def matches(self, lookup: Callable[[str], str | None]) -> bool:
        for field, equal, value in self.terms:
            actual = lookup(field) or ""
            if (actual == value) != equal:
                return False
        return True

    @property
    def fields(self) -> set[str]:
        return {field for field, _, _ in self.terms}


def parse_fields(text: str | None, supported: Callable[[str], bool]) -> FieldSelector:
    """``?fieldSelector=``: ``a=b``, ``a==b``, ``a!=b``; a field the resource does not
    index is a 400 ``field label not supported``, as on a real server."""
    if not text or not text.strip():
        return FieldSelector()
    terms: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*([^!=\s]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not match:
            raise status.bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = match.groups()
        if not supported(field):
            raise status.bad_request(f"field label not supported: {field}")
        terms.append((field, op != "!=", value))
    return FieldSelector(tuple(terms))
