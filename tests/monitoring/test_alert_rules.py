"""The chart's alerts evaluated against data: promtool runs the unit tests of
charts/tickwork/tests/alerts/ over the rules rendered with the default values, and every
alert has a case where it fires and one where it stays silent. Each alert links to a
runbook of docs/operations.md at an absolute URL, and reads only series some role
exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from chart.chart import ROOT, render

from monitoring import rules
from monitoring.support import prometheus_tool
from tickwork.engine.metrics import Metrics
from tickwork.operator.leadership import OperatorMetrics

OPERATIONS = ROOT / "docs" / "operations.md"
DASHBOARD = ROOT / "charts" / "tickwork" / "files" / "dashboard.json"


def test_promtool_passes_every_alert_test(tmp_path: Path) -> None:
    command = prometheus_tool("promtool")
    # The tests load ../rules.yaml: the same layout, with a fresh render.
    rules.write(tmp_path / "rules.yaml")
    shutil.copytree(rules.ALERT_TESTS, tmp_path / "alerts")
    files = sorted(p.name for p in rules.ALERT_TESTS.glob("*.yaml"))
    assert files, "no alert tests"
    result = subprocess.run(
        [command, "test", "rules", *files],
        cwd=tmp_path / "alerts",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _cases() -> dict[str, dict[str, list[str]]]:
    """Per alert: the test cases where it is expected to fire, and to stay silent."""
    found: dict[str, dict[str, list[str]]] = {}
    for path in sorted(rules.ALERT_TESTS.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        assert document["rule_files"] == ["../rules.yaml"], path.name
        for test in document["tests"]:
            for case in test.get("alert_rule_test", []):
                kind = "firing" if case.get("exp_alerts") else "silent"
                where = f"{path.name}: {test.get('name', '?')} at {case['eval_time']}"
                found.setdefault(case["alertname"], {"firing": [], "silent": []})[kind].append(
                    where
                )
    return found


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    cases = _cases()
    for alert in rules.alerts():
        assert cases.get(alert, {}).get("firing"), f"no test where {alert} fires"
        assert cases.get(alert, {}).get("silent"), f"no test where {alert} stays silent"
    assert set(cases) <= set(rules.alerts()), "tests of alerts the chart does not have"


def _runbooks() -> set[str]:
    """The anchors of the runbook headings under "Alerts and runbooks"."""
    text = OPERATIONS.read_text()
    section = text.split("\n## Alerts and runbooks\n", 1)[1].split("\n## ", 1)[0]
    return {heading.lower() for heading in re.findall(r"^### (\w+)$", section, re.MULTILINE)}


def test_each_alert_links_to_its_runbook_at_an_absolute_url() -> None:
    alerts = rules.alerts()
    assert set(_runbooks()) == {name.lower() for name in alerts}
    for name, alert in alerts.items():
        url = alert["annotations"]["runbook_url"]
        assert url == f"https://tickwork.dev/docs/operations/#{name.lower()}"
    base = "https://git.example.internal/tickwork/blob/main/docs/operations.md"
    values = {**rules.VALUES, "metrics": {"prometheusRule": {"enabled": True}}}
    values["metrics"]["prometheusRule"]["runbookBaseUrl"] = base
    [rule] = render(values).kinds("PrometheusRule")
    for alert in (r for group in rule["spec"]["groups"] for r in group["rules"]):
        assert alert["annotations"]["runbook_url"] == f"{base}#{alert['alert'].lower()}"


def test_the_thresholds_are_the_values() -> None:
    values = {
        **rules.VALUES,
        "metrics": {
            "prometheusRule": {
                "enabled": True,
                "startLagSeconds": 2.5,
                "oldestReadySeconds": 90,
                "leaseExpiryRatio": 0.05,
            }
        },
    }
    [rule] = render(values).kinds("PrometheusRule")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert alerts["TickworkCriticalStartLag"]["expr"].strip().endswith("> 2.5")
    assert alerts["TickworkCriticalBacklogStale"]["expr"].strip().endswith("> 90")
    assert "> 0.05 * sum" in alerts["TickworkLeaseExpiries"]["expr"]
    assert alerts["TickworkLeaseExpiries"]["annotations"]["summary"].startswith("More than 5 %")


def test_the_alerts_on_up_need_the_charts_service_monitor() -> None:
    """They match the job label the ServiceMonitor gives; another scrape configuration
    would never produce it, and they would fire for good."""
    without = {**rules.VALUES, "metrics": {"prometheusRule": {"enabled": True}}}
    [rule] = render(without).kinds("PrometheusRule")
    names = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert not names & {"TickworkSchedulerDown", "TickworkDispatcherDown"}
    assert {"TickworkSchedulerDown", "TickworkDispatcherDown"} <= set(rules.alerts())


def selectors(node: Any) -> list[Any]:
    """Every vector selector of a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        return [node]
    children: list[Any] = []
    for attribute in ("lhs", "rhs", "expr", "vector_selector", "param"):
        child = getattr(node, attribute, None)
        if child is not None:
            children.append(child)
    children.extend(getattr(node, "args", None) or [])
    return [found for child in children for found in selectors(child)]


def metric_names(expression: str) -> set[str]:
    names = set()
    for selector in selectors(promql_parser.parse(expression)):
        if selector.name:
            names.add(selector.name)
    return names


def _exported() -> set[str]:
    """The series names the roles' registries can export (a histogram's and a counter's
    with their suffixes), and Prometheus's own ``up``."""
    names = {"up"}
    for registry in (Metrics().registry, OperatorMetrics().registry):
        for family in registry.collect():
            names.add(family.name)
            if family.type == "counter":
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
    return names


def test_the_alerts_and_the_dashboard_read_only_exported_series() -> None:
    exported = _exported()
    for name, alert in rules.alerts().items():
        assert metric_names(alert["expr"]) <= exported, name
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            assert metric_names(target["expr"]) <= exported, panel["title"]
