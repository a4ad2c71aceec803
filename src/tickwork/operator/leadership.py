"""Which replica of the operator leads: the election as ``tickwork operator`` sets it
up (one Lease, ``tickwork-operator``, in the install namespace, through the same Lease
code as the scheduler's shard ownership) and the metrics that show it.

Kopf's own peering was the alternative; it is not used because it needs a
cluster-scoped ``ClusterKopfPeering`` CRD (or a namespaced one) in every install, only
pauses Kopf's watchers (not the status pass, the Event poster or the webhook keeper),
and elects by priority without a lease: two replicas of the same priority both pause,
and a partitioned one keeps writing until it sees the others. A Lease gives one
holder at a time, a deadline the holder stops writing before, and a release on a clean
stop.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from tickwork.coordination import kubernetes
from tickwork.coordination.coordinator import Timing
from tickwork.coordination.leader import OPERATOR_LEASE, Change, LeaderElection
from tickwork.core import pod
from tickwork.core.settings import LeaderElectionSettings
from tickwork.engine.metrics import register_process_collectors
from tickwork.operator.cluster import Cluster

DEFAULT_NAMESPACE = "tickwork"
LABELS = {**kubernetes.MANAGED_BY, kubernetes.ROLE_LABEL: "operator"}


class OperatorMetrics:
    """The operator's own series, on its health port's ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.leader = Gauge(
            "tickwork_operator_leader",
            "1 while this operator replica leads (runs the handlers, the status pass and "
            "the Events), 0 while it stands by",
            registry=self.registry,
        )
        self.transitions = Counter(
            "tickwork_operator_leadership_transitions",
            "Leadership changes of this replica: acquired, lost (its Lease expired or was "
            "taken) or released (clean stop)",
            ["change"],
            registry=self.registry,
        )
        for change in ("acquired", "lost", "released"):
            self.transitions.labels(change)
        register_process_collectors(self.registry)

    def changed(self, change: Change) -> None:
        self.leader.set(1 if change == "acquired" else 0)
        self.transitions.labels(change).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def enabled(settings: LeaderElectionSettings) -> bool:
    """``--leader-election``, or its default: on in a pod."""
    return settings.enabled if settings.enabled is not None else kubernetes.in_cluster()


def election(cluster: Cluster, settings: LeaderElectionSettings) -> LeaderElection:
    """The election of this replica, over the operator's own API client."""
    timing = Timing(lease_seconds=settings.lease_seconds)
    leases = kubernetes.KubernetesLeases(
        cluster.api,
        settings.lease_namespace or pod.namespace() or DEFAULT_NAMESPACE,
        0,  # no shards: only the one named Lease
        request_seconds=timing.call * 0.8,
    )
    identity = settings.identity or pod.identity()
    return LeaderElection(
        leases,
        identity,
        timing,
        name=OPERATOR_LEASE,
        labels=LABELS,
        role="operator",
    )
