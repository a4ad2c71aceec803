"""Secure defaults of the chart: NetworkPolicies that let each tickwork pod be reached
on its ports by those who need them only, ServiceAccount tokens mounted only where a
role calls the API server, the workers' token audience, TLS on the dispatcher and the
proxies it believes."""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from chart import chart as chart_module
from chart import rbac
from chart.chart import CHART, NAMESPACE, RELEASE, VALUE_SETS, Rendered, name, rendered

ROLES = ("dispatcher", "scheduler", "operator")
MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector selects an object with ``labels``."""
    if not all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for requirement in selector.get("matchExpressions", []):
        key, operator = requirement["key"], requirement["operator"]
        values = requirement.get("values", [])
        held = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not held:
            return False
    return True


def pods(document: Rendered) -> dict[str, dict[str, Any]]:
    """Each workload's pod template, by workload name."""
    return {
        w["metadata"]["name"]: w["spec"]["template"]
        for w in document.documents
        if w["kind"] in ("Deployment", "StatefulSet", "Job")
    }


def policy_of(document: Rendered, component: str) -> dict[str, Any]:
    [found] = [
        p
        for p in document.kinds("NetworkPolicy")
        if p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component") == component
    ]
    return found


def container_ports(pod: dict[str, Any]) -> set[int]:
    return {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}


def peers(rule: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = rule.get("from", [])
    return found


def ports(rule: dict[str, Any]) -> set[int]:
    return {p["port"] for p in rule["ports"]}


def with_policies(key: str) -> bool:
    return bool(VALUE_SETS[key].get("networkPolicy", {}).get("enabled", True))


# --- NetworkPolicies ---


@pytest.mark.parametrize("values", [k for k in sorted(VALUE_SETS) if with_policies(k)])
def test_every_pod_is_behind_one_policy_on_its_own_ports(values: str) -> None:
    document = rendered(values)
    # The hook Jobs' pods serve nothing and live while Helm installs, upgrades or
    # uninstalls, when the policies do not exist yet or any more.
    hooks = {h["metadata"]["name"] for h in document.hooks()}
    templates = {w: t for w, t in pods(document).items() if w not in hooks}
    covered = set()
    for policy in document.kinds("NetworkPolicy"):
        spec = policy["spec"]
        assert "Ingress" in spec["policyTypes"]
        [(workload, pod)] = [
            (w, t)
            for w, t in templates.items()
            if selects(spec["podSelector"], t["metadata"]["labels"])
        ]
        covered.add(workload)
        for rule in spec["ingress"]:
            assert ports(rule) <= container_ports(pod), f"{policy['metadata']['name']}"
            assert all(p["protocol"] == "TCP" for p in rule["ports"])
    assert covered == set(templates)


def test_the_dispatcher_is_reached_by_workers_its_namespace_ingress_and_prometheus() -> None:
    document = rendered("minimal")
    [rule] = policy_of(document, "dispatcher")["spec"]["ingress"]
    assert ports(rule) == {8080}
    assert peers(rule) == [
        {"podSelector": {}},  # the release's namespace
        {"namespaceSelector": {"matchLabels": {"tickwork.dev/workers": "true"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}},
        MONITORING,
    ]

    values = VALUE_SETS["everything"]["networkPolicy"]
    [rule] = policy_of(rendered("everything"), "dispatcher")["spec"]["ingress"]
    teams = {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    # The teams' and the job-runners' namespaces.
                    "values": ["team-a", "team-b", "team-c"],
                }
            ]
        }
    }
    assert peers(rule) == [
        {"podSelector": {}},
        *values["workers"],
        teams,
        *values["ingressController"],
        *values["monitoring"],
    ]


def test_metrics_ports_only_from_prometheus_and_the_webhook_from_anywhere() -> None:
    document = rendered("minimal")
    [rule] = policy_of(document, "scheduler")["spec"]["ingress"]
    assert (ports(rule), peers(rule)) == ({8081}, [MONITORING])
    webhook, health = policy_of(document, "operator")["spec"]["ingress"]
    # The API server's address cannot be selected: the webhook port is open to all.
    assert webhook == {"ports": [{"port": 9443, "protocol": "TCP"}]}
    assert (ports(health), peers(health)) == ({8081}, [MONITORING])
    assert policy_of(document, "migrate")["spec"]["ingress"] == []

    # Without monitoring peers nobody reaches them (never everybody).
    bare = rendered("no-webhook")
    for component in ("scheduler", "operator", "migrate"):
        assert policy_of(bare, component)["spec"]["ingress"] == [], component
    [rule] = policy_of(bare, "dispatcher")["spec"]["ingress"]
    assert peers(rule) == [{"podSelector": {}}]


@pytest.mark.parametrize("values", [k for k in sorted(VALUE_SETS) if with_policies(k)])
def test_no_rule_lets_everybody_in_but_the_webhooks(values: str) -> None:
    for policy in rendered(values).kinds("NetworkPolicy"):
        for rule in policy["spec"]["ingress"]:
            if "from" not in rule:
                assert policy["metadata"]["name"] == name("operator")
                assert ports(rule) == {9443}
                continue
            assert rule["from"], "an empty from admits every source"
            for peer in rule["from"]:
                assert peer, "an empty peer admits every source"
                assert peer.get("namespaceSelector") != {}, "every namespace"
                if peer == {"podSelector": {}}:  # the release's namespace
                    assert policy["metadata"]["name"] == name("dispatcher")


def test_postgresql_only_from_tickwork_pods() -> None:
    document = rendered("everything")
    [rule] = policy_of(document, "postgresql")["spec"]["ingress"]
    assert ports(rule) == {5432}
    [peer] = peers(rule)
    assert set(peer) == {"podSelector"}  # the release's namespace only
    templates = pods(document)
    admitted = {
        w for w, t in templates.items() if selects(peer["podSelector"], t["metadata"]["labels"])
    }
    migrate = next(w for w in templates if "-migrate-" in w)
    assert admitted == {name("dispatcher"), name("scheduler"), name("operator"), migrate}
    # Another release's scheduler in the same namespace is not admitted.
    other = dict(templates[name("scheduler")]["metadata"]["labels"])
    other["app.kubernetes.io/instance"] = "other"
    assert not selects(peer["podSelector"], other)
    assert not selects(peer["podSelector"], {"app": "psql-client"})


def test_egress_is_limited_only_when_asked() -> None:
    for policy in rendered("minimal").kinds("NetworkPolicy"):
        assert policy["spec"]["policyTypes"] == ["Ingress"] and "egress" not in policy["spec"]
    document = rendered("everything")
    extra = VALUE_SETS["everything"]["networkPolicy"]["egress"]["extraRules"]
    database = pods(document)[name("postgresql")]["metadata"]["labels"]
    for component in (*ROLES, "migrate"):
        spec = policy_of(document, component)["spec"]
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        dns, postgresql, *rest = spec["egress"]
        assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
        [to] = postgresql["to"]
        assert selects(to["podSelector"], database) and ports(postgresql) == {5432}
        assert rest == extra
    # The bundled PostgreSQL itself serves; its egress is left alone.
    assert policy_of(document, "postgresql")["spec"]["policyTypes"] == ["Ingress"]


def test_policies_can_be_turned_off() -> None:
    assert not rendered("namespaced").kinds("NetworkPolicy")


# --- the values this file is about, in the schema and rendered somewhere ---

NEW_VALUES = (
    "dispatcher.authAudiences",
    "dispatcher.trustedProxies",
    "dispatcher.tls.enabled",
    "dispatcher.tls.existingSecret",
    "dispatcher.tls.certManager.enabled",
    "dispatcher.tls.certManager.issuerRef",
    "dispatcher.tls.certManager.dnsNames",
    "metrics.serviceMonitor.tlsConfig",
    "metrics.serviceMonitor.bearerTokenFile",
    "networkPolicy.enabled",
    "networkPolicy.workers",
    "networkPolicy.ingressController",
    "networkPolicy.monitoring",
    "networkPolicy.egress.enabled",
    "networkPolicy.egress.extraRules",
)


def _at(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return KeyError
        node = node[key]
    return node


def test_the_value_sets_set_every_new_value() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in NEW_VALUES:
        default = _at(defaults, path)
        assert default is not KeyError, f"{path} is not in values.yaml"
        given = [_at(v, path) for v in VALUE_SETS.values()]
        assert any(g is not KeyError and g != default for g in given), f"no value set sets {path}"
    # The render with everything on sets each one that has a second branch.
    everything = VALUE_SETS["everything"]
    for path in NEW_VALUES:
        if path.endswith(
            ("existingSecret", "issuerRef", "tlsConfig", "bearerTokenFile", "networkPolicy.enabled")
        ):
            continue  # the other branch: the namespaced set
        assert _at(everything, path) is not KeyError, path


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"dispatcher": {"authAudiences": []}}, "/dispatcher/authAudiences"),
        ({"dispatcher": {"authAudiences": ["two words"]}}, "/dispatcher/authAudiences/0"),
        ({"dispatcher": {"trustedProxies": ["proxy.internal"]}}, "/dispatcher/trustedProxies/0"),
        ({"dispatcher": {"trustedProxies": ["*", "10.0.0.1"]}}, "/dispatcher/trustedProxies"),
        ({"dispatcher": {"tls": {"secret": "x"}}}, "secret"),
        ({"networkPolicy": {"enable": True}}, "enable"),
        # Empty selectors would select every namespace or pod: refused.
        ({"networkPolicy": {"monitoring": [{}]}}, "/networkPolicy/monitoring/0"),
        ({"networkPolicy": {"workers": [{"namespaceSelector": {}}]}}, "namespaceSelector"),
        (
            {"networkPolicy": {"workers": [{"namespaceSelector": {"matchLabels": {}}}]}},
            "matchLabels",
        ),
        ({"networkPolicy": {"ingressController": [{"podSelector": {"app": "x"}}]}}, "app"),
        (
            {
                "networkPolicy": {
                    "workers": [
                        {
                            "namespaceSelector": {
                                "matchExpressions": [{"key": "a", "operator": "Is"}]
                            }
                        }
                    ]
                }
            },
            "operator",
        ),
        (
            {
                "networkPolicy": {
                    "workers": [
                        {
                            "ipBlock": {"cidr": "10.0.0.0/8"},
                            "podSelector": {"matchLabels": {"a": "b"}},
                        }
                    ]
                }
            },
            "/networkPolicy/workers/0",
        ),
    ],
)
def test_bad_new_values_are_refused(values: dict[str, Any], names: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(names)):
        chart_module.chart().validate_schema(values)


# --- ServiceAccount tokens ---


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_a_token_is_mounted_only_where_the_api_server_is_called(values: str) -> None:
    document = rendered(values)
    given = VALUE_SETS[values]
    for account in document.kinds("ServiceAccount"):
        assert account["automountServiceAccountToken"] is False
    expected = {
        # The hooks: the secrets they create, the finalizers they remove.
        name("secrets"): True,
        name("uninstall"): True,
        name("operator"): True,
        name("scheduler"): given.get("scheduler", {}).get("coordination", "kubernetes")
        == "kubernetes",
        name("dispatcher"): given.get("dispatcher", {}).get("auth", "kubernetes") == "kubernetes",
        # Creates and watches Jobs, in each of its namespaces.
        f"{name('job-runner')}-{NAMESPACE}": bool(given.get("jobRunner", {}).get("enabled")),
    }
    # The job-runners' pods are in their namespaces, their accounts too.
    where = {w["metadata"]["name"]: w["metadata"].get("namespace") for w in document.documents}
    for workload, pod in pods(document).items():
        mounted = pod["spec"]["automountServiceAccountToken"]
        assert mounted is expected.get(workload, False), workload
        # Whatever RBAC grants a pod's account, the pod must hold its token, and back.
        account = pod["spec"].get("serviceAccountName")
        if account is not None:
            granted = rbac.granted(document, account, where.get(workload) or NAMESPACE)
            assert bool(granted) is mounted, workload


# --- the dispatcher: audience, proxies, TLS ---


def _dispatcher(document: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = document.one("Deployment", name("dispatcher"))["spec"]["template"]["spec"]
    [container] = pod["containers"]
    return pod, container


def test_the_dispatcher_asks_for_the_tickwork_audience_and_named_proxies() -> None:
    _, container = _dispatcher(rendered("minimal"))
    assert [a for a in container["args"] if a.startswith("--auth-audience")] == [
        "--auth-audience=tickwork"
    ]
    assert not [a for a in container["args"] if a.startswith("--forwarded-allow-ips")]
    _, container = _dispatcher(rendered("everything"))
    assert {"--forwarded-allow-ips=10.0.0.0/8", "--forwarded-allow-ips=192.168.1.10"} <= set(
        container["args"]
    )
    assert "--auth-audience=https://kubernetes.default.svc" in container["args"]


def test_the_dispatcher_serves_https_with_cert_manager_or_a_secret() -> None:
    document = rendered("everything")
    pod, container = _dispatcher(document)
    secret = f"{RELEASE}-tickwork-dispatcher-tls"
    assert {"--tls-cert=/etc/tickwork/tls/tls.crt", "--tls-key=/etc/tickwork/tls/tls.key"} <= set(
        container["args"]
    )
    [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == secret
    assert container["ports"] == [{"name": "https", "containerPort": 8080}]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
        assert container[probe]["httpGet"]["port"] == "https"
    service = document.one("Service", name("dispatcher"))
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 80, "targetPort": "https", "appProtocol": "https"}
    ]
    certificate = document.one("Certificate", secret)
    assert certificate["spec"]["secretName"] == secret
    dns = certificate["spec"]["dnsNames"]
    assert f"{name('dispatcher')}.{NAMESPACE}.svc" in dns and "tickwork.example.internal" in dns
    issuer = document.one("Issuer", f"{RELEASE}-tickwork-dispatcher")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["issuerRef"] == {
        "kind": "Issuer",
        "name": issuer["metadata"]["name"],
    }
    [monitor] = document.kinds("ServiceMonitor")
    [endpoint] = [e for e in monitor["spec"]["endpoints"] if e["port"] == "https"]
    assert endpoint["scheme"] == "https"
    # A token from a Secret (authorization.credentials): OpenShift refuses bearerTokenFile.
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "tickwork-metrics-token", "key": "token"},
    }
    assert "bearerTokenFile" not in endpoint
    assert endpoint["tlsConfig"] == {
        "serverName": f"{name('dispatcher')}.{NAMESPACE}.svc",
        "ca": {"secret": {"name": secret, "key": "ca.crt"}},
    }

    own = rendered("namespaced")
    pod, container = _dispatcher(own)
    [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "tickwork-dispatcher-tls"
    assert [c["metadata"]["name"] for c in own.kinds("Certificate")] == [
        f"{RELEASE}-tickwork-webhook-tls"
    ]
    [monitor] = own.kinds("ServiceMonitor")
    [endpoint] = [e for e in monitor["spec"]["endpoints"] if e["port"] == "https"]
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert endpoint["bearerTokenFile"] == "/etc/prometheus/tickwork/token"
    assert "authorization" not in endpoint

    # Off by default: plain HTTP, as before.
    _, container = _dispatcher(rendered("minimal"))
    assert container["ports"] == [{"name": "http", "containerPort": 8080}]
    assert "scheme" not in container["readinessProbe"]["httpGet"]


def test_tls_needs_a_certificate_source() -> None:
    values = {**VALUE_SETS["minimal"], "dispatcher": {"tls": {"enabled": True}}}
    with pytest.raises(helm.HelmRenderError, match=re.escape("dispatcher.tls.existingSecret")):
        chart_module.render(values)


def test_the_notes_say_how_to_reach_the_dispatcher() -> None:
    notes = chart_module.chart().render(
        values=VALUE_SETS["everything"], name=RELEASE, namespace=NAMESPACE, is_install=True
    )
    [text] = [t for path, t in notes.items() if path.endswith("NOTES.txt")]
    assert "https://127.0.0.1:8080/ui/" in text
    assert "tickwork.dev/workers" in text and "audience" in text
