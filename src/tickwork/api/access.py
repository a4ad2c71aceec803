"""Who may see and act on what: the one access policy of the HTTP API, its fast path and
the dashboard.

Every call names its ``Operation``; ``POLICY`` says, for each, which tokens-file roles
may do it and which RBAC attributes (verb and resource on the ``tickwork.dev`` API
group, namespace = tenant) a Kubernetes principal needs. The adapters ask the functions
below and nothing else, so a route, its fast path and the dashboard page that does the
same thing cannot disagree (``docs/security.md`` prints the table).

The order of checks is fixed: the caller's role is checked before anything reads the
request's body (``admit``); what the path and query name (a tenant, a job) is decided
before the body too (``tenant``); only what the body itself names (the queues of a
lease, the runs of a batch) is decided after it is parsed, which the body limit and a
linear parser bound. A caller who may not touch a run gets exactly the answer given for
a run that does not exist (404), so run ids cannot be probed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tickwork.api.auth import FILE_ROLES, Action, Principal, Role
from tickwork.core.errors import Forbidden, InvalidRequest, NotFound
from tickwork.core.records import Attempt, Run, Scope
from tickwork.core.spec import NOTIFY_QUEUE, check_tenant
from tickwork.engine.dispatch import QueueGrant
from tickwork.engine.jobs import Jobs


class Operation(enum.StrEnum):
    """Everything a caller can do, as the policy names it."""

    list_jobs = "jobs.list"
    get_job = "jobs.get"
    put_job = "jobs.put"
    delete_job = "jobs.delete"
    pause_job = "jobs.pause"  # and resume
    enqueue = "runs.create"  # one run or a batch
    list_runs = "runs.list"
    get_run = "runs.get"
    cancel_run = "runs.cancel"
    lease = "queues.lease"
    list_queues = "queues.list"
    pause_queue = "queues.pause"  # and resume
    report = "runs.report"  # heartbeat and complete, singly or in batches
    list_dead = "dlq.list"
    settle_dead = "dlq.settle"  # replay and discard
    list_audit = "audit.list"
    list_targets = "notifications.list"
    get_target = "notifications.get"
    put_target = "notifications.put"
    delete_target = "notifications.delete"
    # Bulk operations: replay, discard or cancel every run matching a filter.
    create_operation = "operations.create"
    list_operations = "operations.list"
    get_operation = "operations.get"
    cancel_operation = "operations.cancel"
    read_metrics = "metrics.read"
    read_openapi = "openapi.read"
    use_dashboard = "dashboard.use"  # sign in; each page then asks for what it shows


@dataclass(frozen=True, slots=True)
class Rule:
    """Who may do one operation.

    ``roles``: the tokens-file roles that may. ``verb`` and ``resource``: the RBAC
    attributes a Kubernetes principal needs in the tenant's namespace (``named``: with
    the job's or queue's name as resourceName); ``path`` instead names a non-resource
    URL; neither: any Kubernetes principal may. ``tenants``: whether an admin may act
    for another tenant with ``?tenant=`` (a Kubernetes principal may name any
    namespace, where RBAC decides).
    """

    roles: frozenset[Role]
    verb: str = ""
    resource: str = ""
    named: bool = False
    path: str | None = None
    tenants: bool = True


_TEAM: Final = frozenset({Role.team, Role.admin})
_WORKER: Final = frozenset({Role.worker, Role.admin})

POLICY: Final[Mapping[Operation, Rule]] = {
    Operation.list_jobs: Rule(_TEAM, "list", "scheduledjobs"),
    Operation.get_job: Rule(_TEAM, "get", "scheduledjobs", named=True),
    Operation.put_job: Rule(_TEAM, "update", "scheduledjobs", named=True),
    Operation.delete_job: Rule(_TEAM, "delete", "scheduledjobs", named=True),
    Operation.pause_job: Rule(_TEAM, "update", "scheduledjobs", named=True),
    Operation.enqueue: Rule(_TEAM, "create", "runs", named=True),
    Operation.list_runs: Rule(_TEAM, "list", "runs"),
    # A worker reads the runs of its queues (its own leases' history).
    Operation.get_run: Rule(_TEAM | _WORKER, "get", "runs", named=True),
    Operation.cancel_run: Rule(_TEAM, "update", "runs", named=True),
    # Workers lease and report in their own tenant only (an admin: any).
    Operation.lease: Rule(_WORKER, "lease", "queues", named=True, tenants=False),
    Operation.report: Rule(_WORKER, "lease", "queues", named=True, tenants=False),
    Operation.list_queues: Rule(_TEAM, "list", "queues"),
    Operation.pause_queue: Rule(_TEAM, "update", "queues", named=True),
    Operation.list_dead: Rule(_TEAM, "list", "dlq"),
    Operation.settle_dead: Rule(_TEAM, "update", "dlq", named=True),
    Operation.list_audit: Rule(_TEAM, "list", "audit"),
    Operation.list_targets: Rule(_TEAM, "list", "notificationtargets"),
    Operation.get_target: Rule(_TEAM, "get", "notificationtargets", named=True),
    Operation.put_target: Rule(_TEAM, "update", "notificationtargets", named=True),
    Operation.delete_target: Rule(_TEAM, "delete", "notificationtargets", named=True),
    Operation.create_operation: Rule(_TEAM, "create", "operations"),
    Operation.list_operations: Rule(_TEAM, "list", "operations"),
    Operation.get_operation: Rule(_TEAM, "get", "operations"),
    Operation.cancel_operation: Rule(_TEAM, "update", "operations"),
    # Queue names and job names of every tenant: an admin's or a scraper's.
    Operation.read_metrics: Rule(
        frozenset({Role.admin, Role.metrics}), "get", path="/metrics", tenants=False
    ),
    Operation.read_openapi: Rule(frozenset(Role) - {Role.kubernetes}, tenants=False),
    Operation.use_dashboard: Rule(_TEAM),
}


def rule(operation: Operation) -> Rule:
    return POLICY[operation]


def action(operation: Operation, tenant: str, name: str | None = None) -> Action:
    """The SubjectAccessReview attributes of ``operation`` in ``tenant`` on ``name``."""
    found = POLICY[operation]
    if found.path is not None:
        return Action(found.verb, path=found.path)
    return Action(found.verb, found.resource, tenant, name if found.named else None)


def admit(principal: Principal, operation: Operation) -> None:
    """Refuse a caller whose role may never do ``operation``: the check made before
    anything reads the request's body. A Kubernetes principal passes; RBAC decides
    once the namespace and name are known."""
    if principal.role is Role.kubernetes:
        return
    allowed = POLICY[operation].roles
    if principal.role not in allowed:
        names = " or ".join(role.value for role in FILE_ROLES if role in allowed)
        article = "an" if names[0] in "aeiou" else "a"
        raise Forbidden(
            f"{operation.value} needs {article} {names} token, not {principal.role.value}"
        )


async def check(principal: Principal, operation: Operation, *actions: Action) -> None:
    """``admit``, then for a Kubernetes principal RBAC on ``actions`` (or the
    operation's own non-resource URL, or nothing when the operation asks none)."""
    admit(principal, operation)
    if principal.grants is None:
        return
    wanted = list(actions)
    found = POLICY[operation]
    if not wanted and found.path is not None:
        wanted = [action(operation, principal.tenant)]
    if wanted:
        await principal.grants.check(wanted)


def acting_tenant(principal: Principal, operation: Operation, requested: str | None) -> str:
    """The tenant a call acts for: the caller's own; another only for an admin (or a
    Kubernetes principal, whose RBAC in that namespace then decides)."""
    if requested is None or requested == principal.tenant:
        return principal.tenant
    if POLICY[operation].tenants and principal.role in (Role.admin, Role.kubernetes):
        try:
            check_tenant(requested)
        except ValueError as error:
            raise InvalidRequest(str(error), field="tenant") from error
        return requested
    raise Forbidden(
        f"this token acts for tenant {principal.tenant!r}, not {requested!r}", field="tenant"
    )


async def tenant(
    principal: Principal,
    operation: Operation,
    requested: str | None = None,
    name: str | None = None,
) -> str:
    """The tenant a call acts for, once the caller may do ``operation`` there (on the
    job ``name``). Everything it needs comes from the path and the query."""
    admit(principal, operation)
    owner = acting_tenant(principal, operation, requested)
    if principal.grants is not None:
        await principal.grants.check([action(operation, owner, name)])
    return owner


def scope(principal: Principal) -> Scope:
    """The runs a tokens-file caller may see and act on, enforced by the engine inside
    the transaction that acts: an admin's, any; a team's, its tenant's; a worker's, its
    tenant's in its queues."""
    if principal.role is Role.admin:
        return Scope()
    return Scope(
        tenant=principal.tenant,
        queues=None if principal.queues is None else tuple(sorted(principal.queues)),
    )


async def run(
    principal: Principal, operation: Operation, jobs: Jobs, run_id: str
) -> tuple[Run, list[Attempt], Scope]:
    """The run with its attempts if ``principal`` may do ``operation`` on it, and the
    scope to act on it in. A run it may not touch is absent, exactly like a run that
    does not exist: a tokens-file caller's scope is applied by the read itself; a
    Kubernetes principal's RBAC is asked in the run's namespace, for its job."""
    admit(principal, operation)
    if principal.grants is None:
        allowed = scope(principal)
        found, attempts = await jobs.run(run_id, allowed)
        return found, attempts, allowed
    found, attempts = await jobs.run(run_id)
    try:
        await principal.grants.check([action(operation, found.tenant, found.job)])
    except Forbidden:
        raise NotFound(f"no run {run_id!r}", field="runId") from None
    return found, attempts, Scope(tenant=found.tenant)


async def lease_queues(principal: Principal, queues: Sequence[str]) -> str | None:
    """Refuse a lease of a queue the caller may not lease; return the tenant whose runs
    it leases (None: an admin's, any tenant's)."""
    admit(principal, Operation.lease)
    if NOTIFY_QUEUE in queues:
        # Its runs are the notifications' deliveries, which the schedulers make: a
        # worker that took one would swallow a team's alert.
        raise Forbidden(
            f"queue {NOTIFY_QUEUE} carries tickwork's own notification deliveries; "
            "no token leases it",
            field="queues",
        )
    if principal.queues is not None:
        outside = sorted(set(queues) - principal.queues)
        if outside:
            raise Forbidden(f"this token may not lease queue(s) {outside}", field="queues")
    if principal.grants is not None:
        tenant = principal.tenant
        await principal.grants.check([action(Operation.lease, tenant, q) for q in queues])
    return None if principal.role is Role.admin else principal.tenant


def reporting(principal: Principal) -> tuple[Scope, QueueGrant | None]:
    """The scope a worker's heartbeats and completions act in, and for a Kubernetes
    principal the check of the runs' queues: RBAC ``lease`` on each run's queue, as for
    the lease itself, in the caller's own namespace. A run in a queue the caller may not
    lease is absent, like a run that does not exist."""
    admit(principal, Operation.report)
    if principal.grants is None:
        return scope(principal), None
    grants = principal.grants
    tenant = principal.tenant

    async def grant(queues: frozenset[str]) -> frozenset[str]:
        ordered = sorted(queues)
        answers = await grants.permitted([action(Operation.report, tenant, q) for q in ordered])
        return frozenset(q for q, yes in zip(ordered, answers, strict=True) if yes)

    return Scope(tenant=tenant), grant
