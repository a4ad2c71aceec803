"""The chart renders with every value set, every manifest is valid for the oldest and
the newest supported Kubernetes, `helm lint` finds nothing, and the values are checked
by values.schema.json."""

from __future__ import annotations

import copy
import re
from typing import Any

import helm_python as helm
import kubernetes_validate
import promql_parser
import pytest
import yaml
from kube import manifests

from chart import chart as chart_module
from chart.chart import CHART, EXTERNAL_KINDS, NAMESPACE, RELEASE, ROOT, VALUE_SETS, name, rendered
from tickwork.core.settings import ApiSettings, OperatorSettings

VERSIONS = (manifests.OLDEST_SUPPORTED, manifests.NEWEST_SUPPORTED)


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_every_manifest_is_valid_kubernetes(values: str) -> None:
    documents = rendered(values).documents
    checked = 0
    for document in documents:
        if document["kind"] in EXTERNAL_KINDS:
            continue
        for version in VERSIONS:
            try:
                manifests.validate(document, version)
            except kubernetes_validate.ValidationError as error:
                raise AssertionError(
                    f"{document['kind']} {document['metadata']['name']} on {version}: {error}"
                ) from error
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_helm_lint_finds_nothing(values: str) -> None:
    for version in VERSIONS:
        report = helm.lint(CHART, VALUE_SETS[values], strict=True, kube_version=f"v{version}")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert not report["errors"] and not problems, report


def test_the_chart_needs_kubernetes_it_is_tested_on() -> None:
    floor = chart_module.chart().metadata["kubeVersion"]
    assert floor == f">={manifests.OLDEST_SUPPORTED}-0"


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"shards": "four"}, "/shards"),
        ({"scheduler": {"replica": 2}}, "replica"),
        ({"dispatcher": {"auth": "anonymous"}}, "/dispatcher/auth"),
        ({"logFormat": "xml"}, "/logFormat"),
        ({"teams": [{"namespace": "team-a", "queues": ["q"]}]}, "serviceAccount"),
        ({"database": {"urls": ["mysql://x"]}}, "/database/urls/0"),
        ({"operator": {"replicas": -1}}, "/operator/replicas"),
        ({"operator": {"antiAffinity": "always"}}, "/operator/antiAffinity"),
        ({"operator": {"podDisruptionBudget": {"maxUnavailable": 1}}}, "maxUnavailable"),
    ],
)
def test_bad_values_are_refused_naming_the_key(values: dict[str, Any], names: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(names)):
        chart_module.chart().validate_schema(values)


def test_a_missing_database_is_one_clear_error() -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape("database.existingSecret, database")):
        chart_module.render({})


def test_tokens_auth_needs_its_secret() -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape("tokens.existingSecret")):
        chart_module.render({**VALUE_SETS["minimal"], "dispatcher": {"auth": "tokens"}})


def _schema_node(schema: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for key in path:
        if node is None or "properties" not in node:
            return None
        node = node["properties"].get(key)
    return node


def test_every_value_is_documented_and_in_the_schema() -> None:
    """Each key of values.yaml is in the schema with a description, and each key with a
    value of its own (not free-form) has a comment right above it in values.yaml."""
    schema = chart_module.chart().schema
    assert schema is not None
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    chart_module.chart().validate_schema(defaults)

    def walk(values: dict[str, Any], node: dict[str, Any], path: str) -> None:
        assert node.get("additionalProperties") is False, f"{path or 'values'} is open"
        for key, value in values.items():
            child = node["properties"].get(key)
            assert child is not None, f"{path}{key} is not in values.schema.json"
            assert child.get("description") or "properties" in child, f"{path}{key}"
            if isinstance(value, dict) and "properties" in child:
                walk(value, child, f"{path}{key}.")

    walk(defaults, schema, "")

    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][A-Za-z0-9]*):(.*)$", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [key for _, key in stack] + [match.group(2)]
        stack.append((indent, match.group(2)))
        node = _schema_node(schema, path)
        if node is None or node.get("type") == "object":
            continue  # a section (its keys are checked), or inside a free-form object
        above = lines[number - 1].strip() if number else ""
        assert above.startswith("#"), f"values.yaml: {'.'.join(path)} has no comment"


def test_the_chart_installs_and_upgrades_the_projects_crd() -> None:
    """The CRD is a template (Helm upgrades it), the very file `make crds` writes,
    kept through an uninstall unless told otherwise; not in crds/, which Helm would
    install once and never upgrade."""
    top = ROOT / "crds" / "scheduledjob.yaml"
    ours = CHART / "files" / "crds" / "scheduledjob.yaml"
    assert ours.read_bytes() == top.read_bytes(), "run `make crds` (it writes the chart's copy)"
    assert not chart_module.chart().crds
    expected = yaml.safe_load(top.read_text())
    [crd] = rendered("minimal").kinds("CustomResourceDefinition")
    metadata = crd["metadata"]
    assert {k: v for k, v in crd.items() if k != "metadata"} == {
        k: v for k, v in expected.items() if k != "metadata"
    }
    assert metadata["name"] == expected["metadata"]["name"]
    assert expected["metadata"]["labels"].items() <= metadata["labels"].items()
    assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert metadata["annotations"] == {"helm.sh/resource-policy": "keep"}
    [dropped] = rendered("extended").kinds("CustomResourceDefinition")  # crds.keep false
    assert "annotations" not in dropped["metadata"]
    own = chart_module.render({**VALUE_SETS["minimal"], "crds": {"install": False}})
    assert not own.kinds("CustomResourceDefinition")
    assert manifests.validate_file(ours) == 1


def test_the_roles_run_locked_down() -> None:
    for _, container in rendered("everything").containers():
        context = container["securityContext"]
        if container["name"] == "postgresql":
            assert context["readOnlyRootFilesystem"] is True
            continue
        assert context == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/tmp" in mounts  # the one writable place
    for workload in rendered("everything").kinds("Deployment"):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001  # the image's user


def test_probes_are_on_healthz_and_readyz() -> None:
    for workload, container in rendered("everything").containers():
        if workload["kind"] != "Deployment":
            continue
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        ports = {p["name"] for p in container["ports"]}
        assert container["readinessProbe"]["httpGet"]["port"] in ports


def test_readiness_probes_outwait_a_hung_shard() -> None:
    """/readyz waits readiness_timeout_seconds for a shard whose link hangs before it
    answers 200 (degraded): a probe that gives up sooner (the kubelet's default is
    1 s) would take every dispatcher out of the Service for one hung shard."""
    waits = {
        "dispatcher": ApiSettings.model_fields["readiness_timeout_seconds"].default,
        "operator": OperatorSettings.model_fields["readiness_timeout_seconds"].default,
    }
    seen = set()
    for workload, container in rendered("everything").containers():
        role = workload["metadata"]["labels"].get("app.kubernetes.io/component")
        if workload["kind"] == "Deployment" and role in waits:
            seen.add(role)
            assert container["readinessProbe"]["timeoutSeconds"] >= waits[role] + 1, role
    assert seen == set(waits)


def test_database_urls_come_from_a_secret() -> None:
    for values, secret in (("minimal", name("database")), ("namespaced", "tickwork-database")):
        for _, container in rendered(values).containers():
            if container.get("command"):
                continue  # a hook Job: it never reads the database
            [url] = [e for e in container["env"] if e["name"] == "TICKWORK_DATABASE_URL"]
            assert url["valueFrom"]["secretKeyRef"] == {"name": secret, "key": "urls"}
    assert not rendered("namespaced").kinds("Secret")  # the existing Secret is used


def test_per_shard_urls_and_the_bundled_postgresql() -> None:
    import base64

    secret = rendered("no-webhook").one("Secret", name("database"))
    urls = base64.b64decode(secret["data"]["urls"]).decode().split()
    assert len(urls) == 2 and urls[0].endswith("shard=0")

    # A password given: in the chart's Secret. None: drawn at install by the secrets
    # hook into the same Secret (a render holds no random value).
    given = copy.deepcopy(VALUE_SETS["everything"])
    given["postgresql"]["password"] = "a-given-password"
    secret = chart_module.render(given).one("Secret", name("database"))
    [url] = base64.b64decode(secret["data"]["urls"]).decode().split()
    password = base64.b64decode(secret["data"]["postgres-password"]).decode()
    assert url == (
        f"postgresql://tickwork:{password}@{name('postgresql')}.{NAMESPACE}.svc:5432/tickwork"
    )
    assert password == "a-given-password"
    everything = rendered("everything")
    assert not everything.kinds("Secret")
    [hook] = [
        j
        for j in everything.hooks()
        if j["kind"] == "Job" and j["metadata"]["name"] == name("secrets")
    ]
    [container] = hook["spec"]["template"]["spec"]["containers"]
    assert f"--database={name('database')}" in container["args"]
    assert f"--postgresql-host={name('postgresql')}.{NAMESPACE}.svc" in container["args"]
    postgres = everything.one("StatefulSet", name("postgresql"))
    [container] = postgres["spec"]["template"]["spec"]["containers"]
    [env] = [e for e in container["env"] if e["name"] == "POSTGRES_PASSWORD"]
    assert env["valueFrom"]["secretKeyRef"]["name"] == name("database")


def test_scheduler_replicas_spread_and_dispatcher_scales() -> None:
    default = rendered("minimal")
    scheduler = default.one("Deployment", name("scheduler"))
    assert scheduler["spec"]["replicas"] == 2
    preferred = scheduler["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in preferred
    hard = rendered("namespaced").one("Deployment", name("scheduler"))
    required = hard["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in required

    dispatcher = default.one("Deployment", name("dispatcher"))
    assert "replicas" not in dispatcher["spec"]  # the HPA owns it
    hpa = default.one("HorizontalPodAutoscaler", name("dispatcher"))
    assert hpa["spec"]["scaleTargetRef"]["name"] == name("dispatcher")
    assert not rendered("namespaced").kinds("HorizontalPodAutoscaler")
    budgets = {p["metadata"]["name"] for p in default.kinds("PodDisruptionBudget")}
    assert budgets == {name("operator"), name("scheduler"), name("dispatcher")}


def test_operator_replicas_elect_a_leader_and_roll_one_at_a_time() -> None:
    default = rendered("minimal")
    operator = default.one("Deployment", name("operator"))
    spec = operator["spec"]
    assert spec["replicas"] == 2
    # A new replica is up (a standby, serving admission) before an old one goes.
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    pod = spec["template"]["spec"]
    preferred = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert (
        preferred[0]["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == (spec["selector"]["matchLabels"])
    )
    [container] = pod["containers"]
    assert {"--leader-election", f"--lease-namespace={NAMESPACE}", "--identity=$(POD_NAME)"} <= (
        set(container["args"])
    )
    assert "--lease-seconds=10" in container["args"]
    budget = default.one("PodDisruptionBudget", name("operator"))
    assert budget["spec"]["minAvailable"] == 1
    assert "maxUnavailable" not in budget["spec"]

    # One replica: no budget (minAvailable 1 would forbid every drain).
    single = rendered("no-webhook")
    assert single.one("Deployment", name("operator"))["spec"]["replicas"] == 1
    budgets = {p["metadata"]["name"] for p in single.kinds("PodDisruptionBudget")}
    assert name("operator") not in budgets
    hard = single.one("Deployment", name("operator"))["spec"]["template"]["spec"]["affinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in hard["podAntiAffinity"]


def test_services_select_their_pods() -> None:
    everything = rendered("everything")
    workloads = everything.kinds("Deployment") + everything.kinds("StatefulSet")
    for service in everything.kinds("Service"):
        selector = service["spec"]["selector"]
        [pod] = [
            w["spec"]["template"]
            for w in workloads
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports


def test_webhook_tls_from_the_secrets_hook_or_cert_manager() -> None:
    """No render holds a certificate (it would differ at every render): without
    cert-manager the secrets hook draws one into the Secret the operator mounts, and
    the operator writes its CA into caBundle; with it, a Certificate and the CA
    injector do."""
    default = rendered("minimal")
    secret = f"{RELEASE}-tickwork-webhook-tls"
    assert not default.kinds("Secret") or all(
        s["metadata"]["name"] != secret for s in default.kinds("Secret")
    )
    [configuration] = default.kinds("ValidatingWebhookConfiguration")
    assert configuration["metadata"]["name"] == (
        f"{RELEASE}-tickwork.{NAMESPACE}.scheduledjobs.tickwork.dev"
    )
    [webhook] = configuration["webhooks"]
    assert "caBundle" not in webhook["clientConfig"]
    assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Ignore", 5)
    [hook] = [
        j for j in default.hooks() if j["kind"] == "Job" and "secrets" in j["metadata"]["name"]
    ]
    [container] = hook["spec"]["template"]["spec"]["containers"]
    service = webhook["clientConfig"]["service"]["name"]
    assert {f"--webhook={secret}", f"--webhook-service={service}"} <= set(container["args"])
    operator = default.one("Deployment", name("operator"))["spec"]["template"]["spec"]
    [volume] = [v for v in operator["volumes"] if v["name"] == "webhook-tls"]
    assert volume["secret"]["secretName"] == secret
    assert "--webhook-ca=/etc/tickwork/webhook/ca.crt" in operator["containers"][0]["args"]

    managed = rendered("everything")
    [configuration] = managed.kinds("ValidatingWebhookConfiguration")
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]
    annotation = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert annotation == f"{NAMESPACE}/{secret}"
    webhook_certificate = managed.one("Certificate", secret)
    assert webhook_certificate["spec"]["secretName"] == secret
    operator = managed.one("Deployment", name("operator"))["spec"]["template"]["spec"]
    assert not [a for a in operator["containers"][0]["args"] if a.startswith("--webhook-ca")]
    [hook] = [
        j for j in managed.hooks() if j["kind"] == "Job" and "secrets" in j["metadata"]["name"]
    ]
    assert not [
        a
        for a in hook["spec"]["template"]["spec"]["containers"][0]["args"]
        if a.startswith("--webhook")
    ]
    issued = rendered("namespaced").kinds("Certificate")[0]["spec"]["issuerRef"]
    assert issued == {"name": "ca", "kind": "ClusterIssuer"}
    assert not rendered("namespaced").kinds("Issuer")
    assert not rendered("no-webhook").kinds("ValidatingWebhookConfiguration")


def test_the_dashboard_parses_and_queries_only_real_metrics() -> None:
    import json

    [config_map] = rendered("everything").kinds("ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["tickwork.json"])
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            promql_parser.parse(target["expr"])
    assert len(dashboard["panels"]) >= 10


def test_team_roles_grant_lease_on_their_queues() -> None:
    everything = rendered("everything")
    role = everything.one("Role", f"{RELEASE}-tickwork-exporter.{NAMESPACE}")
    assert role["metadata"]["namespace"] == "team-b"
    [lease] = [r for r in role["rules"] if "lease" in r["verbs"]]
    assert lease == {
        "apiGroups": ["tickwork.dev"],
        "resources": ["queues"],
        "resourceNames": ["billing", "x"],
        "verbs": ["lease"],
    }
    binding = everything.one("RoleBinding", f"{RELEASE}-tickwork-exporter.{NAMESPACE}")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "exporter", "namespace": "team-b"}
    ]


def test_the_webhook_configuration_is_the_operators() -> None:
    """What the chart keeps (with --no-webhook-manage) is what the operator would have
    written itself, but for how the API server reaches it (a Service and its CA)."""
    from tickwork.operator import admission

    for values, namespaces in (("minimal", ()), ("namespaced", ("team-a", "team-b"))):
        [chart_config] = rendered(values).kinds("ValidatingWebhookConfiguration")
        [ours] = chart_config["webhooks"]
        client = dict(ours["clientConfig"])
        assert "caBundle" not in client  # the operator's or cert-manager's to write
        service = {k: v for k, v in client["service"].items() if k != "path"}
        # The operator patches the caBundle of the configuration it is told of.
        [operator] = rendered(values).one("Deployment", name("operator"))["spec"]["template"][
            "spec"
        ]["containers"]
        given = f"--webhook-configuration={chart_config['metadata']['name']}"
        assert given in operator["args"]
        expected = admission.configuration(
            {"service": service}, namespaces, chart_config["metadata"]["name"]
        )
        [theirs] = expected["webhooks"]
        assert {**ours, "clientConfig": client} == theirs
        assert chart_config["metadata"]["name"] == expected["metadata"]["name"]
