"""What the chart's RBAC grants a ServiceAccount, and what a role's calls to the API
server (the emulator's audit) needed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kube.faults import AuditRecord

from chart.chart import NAMESPACE, Rendered

# (apiGroup, resource[/subresource], verb, namespace or "" for cluster-wide, and the
# object's name, or "" for any: a rule's resourceNames, a call's object)
Permission = tuple[str, str, str, str, str]
# Verbs RBAC cannot limit to names: the name is in the body, or there is none.
UNNAMED_VERBS = frozenset({"create", "list", "watch", "deletecollection"})


def granted(rendered: Rendered, account: str, namespace: str = NAMESPACE) -> set[Permission]:
    """Every permission the chart's (Cluster)RoleBindings give the ServiceAccount."""
    found: set[Permission] = set()
    for binding in rendered.kinds("RoleBinding") + rendered.kinds("ClusterRoleBinding"):
        subjects = binding.get("subjects", [])
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == namespace
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace", "") if binding["kind"] == "RoleBinding" else ""
        role = _role(rendered, ref["kind"], ref["name"], scope)
        for rule in role["rules"]:
            names = rule.get("resourceNames") or [""]
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), f"wildcard in {role}"
                        assert not (verb in UNNAMED_VERBS and names != [""]), (
                            f"{role['metadata']['name']}: resourceNames cannot limit {verb}"
                        )
                        found.update((group, resource, verb, scope, name) for name in names)
    return found


def _role(rendered: Rendered, kind: str, name: str, namespace: str) -> dict[str, Any]:
    [role] = [
        r
        for r in rendered.kinds(kind)
        if r["metadata"]["name"] == name
        and (kind == "ClusterRole" or r["metadata"]["namespace"] == namespace)
    ]
    return role


def used(audit: Iterable[AuditRecord], user: str) -> set[Permission]:
    """The permissions the calls ``user`` made needed (discovery needs none)."""
    return {
        (
            record.group,
            record.target,
            record.verb,
            record.namespace,
            "" if record.verb in UNNAMED_VERBS else record.name,
        )
        for record in audit
        if record.user == user and record.resource
    }


def covered(needed: set[Permission], given: set[Permission]) -> set[Permission]:
    """The needed permissions the given ones do not cover (a cluster-wide grant covers
    every namespace, a grant without names every object)."""
    return {
        (group, resource, verb, namespace, name)
        for group, resource, verb, namespace, name in needed
        if not {
            (group, resource, verb, scope, object_name)
            for scope in (namespace, "")
            for object_name in (name, "")
        }
        & given
    }


def unused(needed: set[Permission], given: set[Permission]) -> set[Permission]:
    """The given permissions no call needed (a named grant: no call on that name)."""
    kinds = {(g, r, v) for g, r, v, _, _ in needed}
    names = {(g, r, v, n) for g, r, v, _, n in needed}
    return {p for p in given if p[:3] not in kinds or (p[4] and (*p[:3], p[4]) not in names)}


def check_exact(needed: set[Permission], given: set[Permission], where: str = "") -> None:
    """``given`` covers every ``needed`` permission and grants nothing beyond them."""
    prefix = f"{where}: " if where else ""
    missing, extra = covered(needed, given), unused(needed, given)
    assert not missing, f"{prefix}missing {sorted(missing)}"
    assert not extra, f"{prefix}granted but never used {sorted(extra)}"
