"""The Helm chart rendered offline with the Helm SDK (helm-python-sdk: Helm's Go
library behind a C ABI, no helm binary, no cluster), and what the tests read from it."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tickwork"
RELEASE = "tw"
NAMESPACE = "tickwork"
# Kinds that come with other projects' CRDs: not in Kubernetes' OpenAPI documents.
EXTERNAL_KINDS = {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"}

URL = "postgresql://tickwork:secret@db.example.internal:5432/tickwork"
# The containers the chart itself runs (the roles, the bundled PostgreSQL, the hooks).
CONTAINERS = {
    "operator",
    "scheduler",
    "dispatcher",
    "migrate",
    "postgresql",
    "secrets",
    "uninstall",
    "job-runner",
}
HOOK = "helm.sh/hook"

# The value sets the tests render: the smallest install, everything switched on, and
# the other branch of every switch.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "minimal": {"database": {"urls": [URL]}},
    "everything": {
        "postgresql": {"enabled": True},
        "metrics": {
            "perJobJobs": ["payments/*"],
            "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
            "prometheusRule": {"enabled": True},
            "dashboard": {"enabled": True},
        },
        "operator": {"webhook": {"certManager": {"enabled": True}}},
        "dispatcher": {
            "authAudiences": ["tickwork", "https://kubernetes.default.svc"],
            "uiSecret": {"existingSecret": "ui"},
            "trustedProxies": ["10.0.0.0/8", "192.168.1.10"],
            "queueRateLimits": ["reports=100/60", "mail=5/1"],
            "tls": {
                "enabled": True,
                "certManager": {"enabled": True, "dnsNames": ["tickwork.example.internal"]},
            },
        },
        "networkPolicy": {
            "workers": [
                {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {"key": "tickwork.dev/workers", "operator": "In", "values": ["yes"]}
                        ]
                    }
                },
                {"ipBlock": {"cidr": "10.20.0.0/16", "except": ["10.20.1.0/24"]}},
            ],
            "ingressController": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "in"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}},
                }
            ],
            "monitoring": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "m"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                },
                {"podSelector": {"matchLabels": {"app": "local-prometheus"}}},
            ],
            "egress": {
                "enabled": True,
                "extraRules": [
                    {
                        "to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}],
                        "ports": [{"port": 443, "protocol": "TCP"}],
                    }
                ],
            },
        },
        "teams": [
            {"namespace": "team-a", "serviceAccount": "worker", "queues": ["reports"]},
            {"namespace": "team-b", "serviceAccount": "exporter", "queues": ["billing", "x"]},
        ],
        "jobRunner": {
            "enabled": True,
            "namespaces": ["team-a", "team-c"],
            "queues": ["containers", "containers-gpu"],
        },
    },
    "namespaced": {
        "shards": 2,
        "database": {
            "existingSecret": "tickwork-database",
            "urls": [],
        },
        "operator": {
            "namespaces": ["team-a", "team-b"],
            "webhook": {
                "certManager": {
                    "enabled": True,
                    "issuerRef": {"name": "ca", "kind": "ClusterIssuer"},
                }
            },
        },
        "scheduler": {"antiAffinity": "hard", "replicas": 3, "coordination": "postgres"},
        "dispatcher": {
            "auth": "tokens",
            "tokens": {"existingSecret": "tickwork-tokens"},
            "autoscaling": {"enabled": False},
            "replicas": 3,
            "trustedProxies": ["*"],
            "tls": {
                "enabled": True,
                "existingSecret": "tickwork-dispatcher-tls",
                "certManager": {"issuerRef": {"name": "ca", "kind": "ClusterIssuer"}},
            },
        },
        "metrics": {
            "serviceMonitor": {
                "enabled": True,
                "tlsConfig": {"insecureSkipVerify": True},
                "bearerTokenFile": "/etc/prometheus/tickwork/token",
            }
        },
        "networkPolicy": {"enabled": False},
        "logFormat": "text",
        "migrate": {"enabled": False},
    },
    # Every extension point of the chart set: what a platform adapts without a fork.
    "extended": {
        "shards": 2,
        "database": {
            "shardSecrets": [{"name": "pg-0", "key": "url"}, {"name": "pg-1", "key": "url"}]
        },
        "crds": {"install": True, "keep": False},
        "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "tw@p.iam"}},
        "podLabels": {"team": "platform"},
        "podAnnotations": {"sidecar.istio.io/inject": "false"},
        "priorityClassName": "tickwork",
        "extraEnv": [{"name": "PGSSLROOTCERT", "value": "/etc/tickwork/db-ca/ca.crt"}],
        "extraVolumes": [{"name": "db-ca", "secret": {"secretName": "db-ca"}}],
        "extraVolumeMounts": [{"name": "db-ca", "mountPath": "/etc/tickwork/db-ca"}],
        "extraInitContainers": [
            {
                "name": "cloud-sql-proxy",
                "image": "cloud-sql-proxy:2",
                "restartPolicy": "Always",
                "args": ["--port=5432", "project:region:instance"],
            }
        ],
        "extraContainers": [{"name": "log-shipper", "image": "shipper:1"}],
        "migrate": {
            "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:migrate"}},
            "podLabels": {"job": "migrate"},
            "podAnnotations": {"note": "schema"},
            "priorityClassName": "batch",
            "nodeSelector": {"pool": "jobs"},
            "tolerations": [{"key": "jobs", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "pool", "operator": "In", "values": ["jobs"]}
                                ]
                            }
                        ]
                    }
                }
            },
        },
        **{
            role: {
                "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": f"arn:{role}"}},
                "podLabels": {"role": role},
                "podAnnotations": {"owner": "platform"},
                "priorityClassName": f"{role}-critical",
                "nodeSelector": {"pool": role},
                "tolerations": [{"key": role, "operator": "Exists", "effect": "NoSchedule"}],
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "ScheduleAnyway",
                    }
                ],
            }
            for role in ("operator", "scheduler")
        },
        "dispatcher": {
            "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:dispatcher"}},
            "podLabels": {"role": "dispatcher"},
            "podAnnotations": {"owner": "platform"},
            "priorityClassName": "dispatcher-critical",
            "nodeSelector": {"pool": "dispatcher"},
            "tolerations": [{"key": "dispatcher", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {"role": "dispatcher"}},
                            },
                        }
                    ]
                }
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"role": "dispatcher"}},
                }
            ],
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
                "hosts": ["tickwork.example.internal"],
                "paths": ["/ui", "/v1"],
                "tls": [{"secretName": "tickwork-ingress", "hosts": ["tickwork.example.internal"]}],
            },
            "trustedProxies": ["10.244.3.0/24"],
        },
    },
    "no-webhook": {
        "database": {"urls": [URL + "?shard=0", URL + "?shard=1"]},
        "shards": 2,
        "operator": {"webhook": {"enabled": False}, "replicas": 1, "antiAffinity": "hard"},
        "postgresql": {"enabled": False},
        # Nobody but the release's namespace: no rule admits more.
        "networkPolicy": {"workers": [], "ingressController": [], "monitoring": []},
    },
}


@functools.cache
def chart() -> helm.Chart:
    return helm.Chart.load(CHART)


@dataclasses.dataclass(frozen=True)
class Rendered:
    values: dict[str, Any]
    documents: tuple[dict[str, Any], ...]

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.documents if d["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        [found] = [d for d in self.kinds(kind) if d["metadata"]["name"] == name]
        return found

    def containers(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """(workload, container) for every container of the chart's own in every
        workload (not the sidecars the values add)."""
        for document in self.documents:
            if document["kind"] in ("Deployment", "StatefulSet", "Job"):
                for container in document["spec"]["template"]["spec"]["containers"]:
                    if container["name"] in CONTAINERS:
                        yield document, container

    def hooks(self) -> list[dict[str, Any]]:
        """The Helm hooks among the documents (run at install, upgrade or uninstall)."""
        return [d for d in self.documents if HOOK in (d["metadata"].get("annotations") or {})]


@functools.cache
def _render(key: str) -> Rendered:
    values = copy.deepcopy(VALUE_SETS[key])
    return render(values)


def rendered(key: str) -> Rendered:
    return _render(key)


def render(
    values: dict[str, Any],
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    revision: int | None = None,
) -> Rendered:
    """The chart's documents for ``values``, as an install (or, given a ``revision``
    above 1, an upgrade to it) of ``release`` in ``namespace``."""
    upgrade = revision is not None and revision > 1
    manifests = chart().render(
        values=values,
        name=release,
        namespace=namespace,
        revision=revision,
        is_install=not upgrade,
        is_upgrade=upgrade,
    )
    documents = [
        document
        for path, text in sorted(manifests.items())
        if not path.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document
    ]
    return Rendered(values, tuple(documents))


def name(component: str) -> str:
    return f"{RELEASE}-tickwork-{component}"
