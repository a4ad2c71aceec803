"""Scripted answers for ``TokenReview`` and ``SubjectAccessReview``.

A test says which tokens are valid (and as whom) and which user may do what; the
emulator answers reviews from that, and the general fault scripting (``kube.fail``,
``kube.hang``) makes the endpoints fail or time out.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class User:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    audiences: tuple[str, ...] = ()  # empty: any audience

    def info(self) -> dict[str, Any]:
        body: dict[str, Any] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            body["uid"] = self.uid
        if self.extra:
            body["extra"] = self.extra
        return body

    @classmethod
    def service_account(cls, namespace: str, name: str, uid: str = "") -> User:
        return cls(
            f"system:serviceaccount:{namespace}:{name}",
            uid=uid,
            groups=(
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ),
        )


ADMIN = User("kubernetes-admin", groups=("system:masters", "system:authenticated"))


@dataclasses.dataclass(frozen=True)
class Rule:
    """One scripted authorisation; fields left None match anything, names use globs."""

    allowed: bool
    user: str | None = None
    group: str | None = None  # a group the user is in
    verb: str | None = None
    resource: str | None = None
    api_group: str | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    reason: str = ""

    def matches(self, user: str, groups: list[str], attrs: dict[str, Any]) -> bool:
        def ok(pattern: str | None, value: str) -> bool:
            return pattern is None or fnmatch.fnmatchcase(value, pattern)

        return (
            ok(self.user, user)
            and (self.group is None or any(fnmatch.fnmatchcase(g, self.group) for g in groups))
            and ok(self.verb, attrs.get("verb", ""))
            and ok(self.resource, attrs.get("resource", ""))
            and ok(self.api_group, attrs.get("group", ""))
            and ok(self.namespace, attrs.get("namespace", ""))
            and ok(self.name, attrs.get("name", ""))
            and ok(self.subresource, attrs.get("subresource", ""))
        )


Decision = tuple[bool, str]


@dataclasses.dataclass
class Access:
    """``SubjectAccessReview`` answers: the first matching rule wins; none matches: deny.

    ``decide`` (spec -> (allowed, reason)) overrides the rules when set.
    """

    rules: list[Rule] = dataclasses.field(default_factory=list)
    decide: Callable[[dict[str, Any]], Decision] | None = None

    def allow(self, reason: str = "allowed by the test", **match: str) -> None:
        self.rules.append(Rule(True, reason=reason, **match))

    def deny(self, reason: str = "denied by the test", **match: str) -> None:
        self.rules.append(Rule(False, reason=reason, **match))

    def review(self, spec: dict[str, Any]) -> dict[str, Any]:
        if self.decide is not None:
            allowed, reason = self.decide(spec)
            return {"allowed": allowed, "reason": reason}
        attrs = spec.get("resourceAttributes") or spec.get("nonResourceAttributes") or {}
        user = spec.get("user", "")
        groups = list(spec.get("groups") or [])
        for rule in self.rules:
            if rule.matches(user, groups, attrs):
                if rule.allowed:
                    return {"allowed": True, "reason": rule.reason}
                return {"allowed": False, "denied": True, "reason": rule.reason}
        return {"allowed": False, "reason": "no scripted rule allows it"}


def token_review(tokens: dict[str, User], spec: dict[str, Any]) -> dict[str, Any]:
    user = tokens.get(spec.get("token") or "")
    asked = list(spec.get("audiences") or [])
    if user is None:
        return {
            "authenticated": False,
            "user": {},
            "error": "[invalid bearer token, token lookup failed]",
        }
    if asked and user.audiences and not set(asked) & set(user.audiences):
        return {
            "authenticated": False,
            "user": {},
            "error": "[invalid bearer token, token audiences is invalid]",
        }
    audiences = asked or list(user.audiences) or ["https://kubernetes.default.svc"]
    return {"authenticated": True, "user": user.info(), "audiences": audiences}
