"""A chart GitOps tools can sync: the same values render the same bytes (Argo CD renders
at every sync and applies what differs), the migration Job keeps its name from one
revision to the next, two releases share no cluster-scoped name, and every extension
point a platform needs is a value, rendered where it belongs."""

from __future__ import annotations

import copy
import re
from typing import Any

import helm_python as helm
import pytest

from chart import chart as chart_module
from chart.chart import CHART, CONTAINERS, NAMESPACE, RELEASE, VALUE_SETS, Rendered, name, render

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "CustomResourceDefinition",
}


def _texts(values: dict[str, Any], **options: Any) -> dict[str, str]:
    """The rendered files, NOTES.txt included, straight from the Helm SDK."""
    return chart_module.chart().render(
        values=copy.deepcopy(values), name=RELEASE, namespace=NAMESPACE, **options
    )


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_two_renders_of_the_same_values_are_byte_identical(values: str) -> None:
    first = _texts(VALUE_SETS[values], is_install=True)
    second = _texts(VALUE_SETS[values], is_install=True)
    assert first.keys() == second.keys()
    differing = [path for path in first if first[path] != second[path]]
    assert not differing, f"{values}: rendered differently twice: {differing}"


def _job(document: Rendered) -> dict[str, Any]:
    [job] = [j for j in document.kinds("Job") if j not in document.hooks()]
    return job


def test_the_migration_job_keeps_its_name_from_one_revision_to_the_next() -> None:
    """Argo CD renders every revision as revision 1, Helm counts them: either way the
    Job (and everything else) is the same for the same values, so a sync never tries
    to change a Job's template in place; an image bump is a Job of another name."""
    values = VALUE_SETS["everything"]
    install = _texts(values, revision=1, is_install=True)
    upgrade = _texts(values, revision=7, is_upgrade=True)
    assert {k: v for k, v in install.items() if not k.endswith("NOTES.txt")} == {
        k: v for k, v in upgrade.items() if not k.endswith("NOTES.txt")
    }
    first = _job(render(values, revision=1))
    assert first["metadata"]["name"] == _job(render(values, revision=12))["metadata"]["name"]
    assert re.fullmatch(rf"{RELEASE}-tickwork-migrate-[0-9a-f]{{10}}", first["metadata"]["name"])
    assert "ttlSecondsAfterFinished" not in first["spec"]  # a GitOps tool would recreate it

    bumped = _job(render({**values, "image": {"tag": "0.2.0"}}))
    assert bumped["metadata"]["name"] != first["metadata"]["name"]
    retried = _job(render({**values, "migrate": {"backoffLimit": 3}}))
    assert retried["metadata"]["name"] != first["metadata"]["name"]
    for template in (CHART / "templates").iterdir():
        assert ".Release.Revision" not in template.read_text(), template.name


def _outside(document: Rendered) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of the objects outside the release namespace: cluster
    scoped, or in a team's or a watched namespace."""
    found = set()
    for item in document.documents:
        namespace = item["metadata"].get("namespace", "")
        if item["kind"] in CLUSTER_SCOPED:
            namespace = ""
        elif namespace == NAMESPACE or namespace == "other-namespace":
            continue
        found.add((item["kind"], namespace, item["metadata"]["name"]))
    return found


def test_two_releases_in_one_cluster_share_no_cluster_scoped_name() -> None:
    """A second release (of the same name in another namespace, or of another name
    beside the first) collides with nothing of the first; the CRD is the cluster's,
    installed by one of them (crds.install=false on the others)."""
    values = copy.deepcopy(VALUE_SETS["everything"])
    values["operator"]["namespaces"] = ["team-a", "team-b"]
    first = render(values)
    second_values = {**copy.deepcopy(values), "crds": {"install": False}}
    for release, namespace in ((RELEASE, "other-namespace"), ("other", NAMESPACE)):
        second = render(second_values, release=release, namespace=namespace)
        ours, theirs = _outside(first), _outside(second)
        assert ours and theirs
        assert not ours & theirs, f"{release} in {namespace}: {sorted(ours & theirs)}"
        for kind in ("ClusterRole", "ValidatingWebhookConfiguration", "Role"):
            assert any(k == kind for k, _, _ in theirs), kind
    # The default install: one webhook configuration named for the release.
    [configuration] = render(VALUE_SETS["minimal"]).kinds("ValidatingWebhookConfiguration")
    assert configuration["metadata"]["name"] == (
        f"{RELEASE}-tickwork.{NAMESPACE}.scheduledjobs.tickwork.dev"
    )


def test_hooks_clean_up_after_themselves_and_come_in_order() -> None:
    hooks = render(VALUE_SETS["everything"]).hooks()
    phases: dict[str, dict[str, list[int]]] = {}
    for hook in hooks:
        annotations = hook["metadata"]["annotations"]
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        weights = phases.setdefault(annotations["helm.sh/hook"], {"Job": [], "other": []})
        weights["Job" if hook["kind"] == "Job" else "other"].append(
            int(annotations["helm.sh/hook-weight"])
        )
    assert set(phases) == {"pre-install,pre-upgrade", "post-delete"}
    for weights in phases.values():
        # The ServiceAccount and its RBAC exist before the Job runs.
        assert max(weights["other"]) < min(weights["Job"])
    # Nothing else is a hook: the release's objects are what GitOps tools compare.
    assert {h["metadata"]["name"] for h in hooks} == {
        name("secrets"),
        name("uninstall"),
        f"{name('uninstall')}.{NAMESPACE}",
    }


# --- the extension points ---


def _pod(document: Rendered, kind: str, workload: str) -> dict[str, Any]:
    [found] = [
        d
        for d in document.kinds(kind)
        if d["metadata"]["name"] == workload or d["metadata"]["name"].startswith(workload + "-")
    ]
    template: dict[str, Any] = found["spec"]["template"]
    return template


ROLES = ("operator", "scheduler", "dispatcher")


def test_every_extension_point_is_rendered_where_it_belongs() -> None:
    values = VALUE_SETS["extended"]
    document = render(values)
    pods = {role: _pod(document, "Deployment", name(role)) for role in ROLES}
    pods["migrate"] = _pod(document, "Job", name("migrate"))
    for role, pod in pods.items():
        spec, labels = pod["spec"], pod["metadata"]["labels"]
        given = values[role]
        assert labels["team"] == "platform" and labels["app.kubernetes.io/component"] == role
        assert labels[next(iter(given["podLabels"]))] == next(iter(given["podLabels"].values()))
        annotations = pod["metadata"]["annotations"]
        assert annotations["sidecar.istio.io/inject"] == "false"
        assert given["podAnnotations"].items() <= annotations.items()
        assert spec["priorityClassName"] == given["priorityClassName"]
        assert spec["nodeSelector"] == given["nodeSelector"]
        assert spec["tolerations"] == given["tolerations"]
        [own] = [c for c in spec["containers"] if c["name"] in CONTAINERS]
        assert {"name": "PGSSLROOTCERT", "value": "/etc/tickwork/db-ca/ca.crt"} in own["env"]
        assert {"name": "db-ca", "mountPath": "/etc/tickwork/db-ca"} in own["volumeMounts"]
        assert {"name": "db-ca", "secret": {"secretName": "db-ca"}} in spec["volumes"]
        # Every role reaches the database through the native sidecar, the Job too.
        assert [c["name"] for c in spec["initContainers"]] == ["cloud-sql-proxy"]
        sidecars = [c["name"] for c in spec["containers"] if c["name"] not in CONTAINERS]
        assert sidecars == ([] if role == "migrate" else ["log-shipper"])
        # Each shard's URL from a Secret of its own, joined by the kubelet.
        env = {e["name"]: e for e in own["env"]}
        assert env["TICKWORK_DATABASE_URL"]["value"] == (
            "$(DATABASE_URL_SHARD_0) $(DATABASE_URL_SHARD_1)"
        )
        names = list(env)
        assert names.index("DATABASE_URL_SHARD_1") < names.index("TICKWORK_DATABASE_URL")
        assert env["DATABASE_URL_SHARD_1"]["valueFrom"]["secretKeyRef"] == {
            "name": "pg-1",
            "key": "url",
        }
        account = document.one("ServiceAccount", spec["serviceAccountName"])
        assert account["metadata"]["annotations"] == {
            "iam.gke.io/gcp-service-account": "tw@p.iam",
            **given["serviceAccount"]["annotations"],
        }
    assert pods["migrate"]["spec"]["affinity"] == values["migrate"]["affinity"]
    assert pods["dispatcher"]["spec"]["affinity"] == values["dispatcher"]["affinity"]
    # A spread constraint without a selector spreads the role's own pods.
    [spread] = pods["scheduler"]["spec"]["topologySpreadConstraints"]
    assert (
        spread["labelSelector"]["matchLabels"]
        == (document.one("Deployment", name("scheduler"))["spec"]["selector"]["matchLabels"])
    )
    [kept] = pods["dispatcher"]["spec"]["topologySpreadConstraints"]
    assert kept == values["dispatcher"]["topologySpreadConstraints"][0]
    # No Secret of the chart's: the shards' are the user's.
    assert not [s for s in document.kinds("Secret") if s["metadata"]["name"] == name("database")]

    [ingress] = document.kinds("Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == values["dispatcher"]["ingress"]["tls"]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "tickwork.example.internal"
    assert [p["path"] for p in rule["http"]["paths"]] == ["/ui", "/v1"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    service = document.one("Service", name("dispatcher"))
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}
    assert not render(VALUE_SETS["minimal"]).kinds("Ingress")


def test_the_chart_labels_cannot_be_overridden_by_pod_labels() -> None:
    values = {
        **VALUE_SETS["minimal"],
        "podLabels": {"app.kubernetes.io/component": "x", "app.kubernetes.io/instance": "y"},
    }
    document = render(values)
    for role in ROLES:
        deployment = document.one("Deployment", name(role))
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_shard_secrets_come_one_per_shard() -> None:
    values = copy.deepcopy(VALUE_SETS["extended"])
    values["shards"] = 4
    with pytest.raises(helm.HelmRenderError, match=re.escape("one Secret per shard (4)")):
        render(values)
    with pytest.raises(helm.HelmRenderError, match=re.escape("leave postgresql.enabled off")):
        render({**values, "shards": 2, "postgresql": {"enabled": True}})
    values["database"]["shardSecrets"] = [{"name": "all", "key": "urls"}]
    [job] = [j for j in render(values).kinds("Job") if "migrate" in j["metadata"]["name"]]
    [container] = job["spec"]["template"]["spec"]["containers"]
    [url] = [e for e in container["env"] if e["name"] == "TICKWORK_DATABASE_URL"]
    assert url["value"] == "$(DATABASE_URL_SHARD_0)"


def test_the_dashboard_session_secret_is_shared_by_every_dispatcher() -> None:
    """Behind two dispatchers a session must be good on both: one secret for all,
    drawn once by the secrets hook unless one is given."""
    for values, secret in (("minimal", name("ui")), ("everything", "ui")):
        document = render(VALUE_SETS[values])
        container = document.one("Deployment", name("dispatcher"))["spec"]["template"]["spec"][
            "containers"
        ][0]
        [env] = [e for e in container["env"] if e["name"] == "TICKWORK_UI_SECRET"]
        reference = env["valueFrom"]["secretKeyRef"]
        assert {k: reference[k] for k in ("name", "key")} == {"name": secret, "key": "secret"}
        # A given Secret must be there; the drawn one is missing only without hooks.
        assert reference.get("optional", False) is (values == "minimal")
        [hook] = [j for j in document.hooks() if j["kind"] == "Job" and "secrets" in str(j)]
        args = hook["spec"]["template"]["spec"]["containers"][0]["args"]
        assert (f"--ui={name('ui')}" in args) == (values == "minimal")


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ({"database": {"shardSecrets": [{"name": "pg-0"}]}}, "key"),
        ({"database": {"shardSecrets": [{"name": "pg-0", "key": "url", "x": 1}]}}, "x"),
        ({"dispatcher": {"ingress": {"paths": ["ui"]}}}, "/dispatcher/ingress/paths/0"),
        ({"dispatcher": {"ingress": {"hosts": ["Not A Host"]}}}, "/dispatcher/ingress/hosts/0"),
        ({"dispatcher": {"ingress": {"tls": [{"hosts": ["a.b"]}]}}}, "secretName"),
        ({"extraEnv": [{"value": "x"}]}, "/extraEnv/0"),
        ({"extraContainers": ["sidecar"]}, "/extraContainers/0"),
        ({"operator": {"serviceAccount": {"annotation": {}}}}, "annotation"),
        ({"scheduler": {"topologySpreadConstraints": [{"maxSkew": 1}]}}, "topologyKey"),
        ({"priorityClassName": "Not Valid"}, "/priorityClassName"),
        ({"crds": {"upgrade": True}}, "upgrade"),
    ],
)
def test_bad_extension_values_are_refused(values: dict[str, Any], names: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(names)):
        chart_module.chart().validate_schema(values)
