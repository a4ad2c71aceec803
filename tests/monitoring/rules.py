"""The chart's alert rules as Prometheus loads them: the PrometheusRule rendered
offline with the default values (with the ServiceMonitor on, as the alerts on ``up``
need), its ``spec`` written as a rule file.

``python -m monitoring.rules`` (from tests/) writes charts/tickwork/tests/rules.yaml, the
file the promtool unit tests in charts/tickwork/tests/alerts/ load; ``make alerts`` writes
it and runs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from chart.chart import CHART, URL, render

ALERT_TESTS = CHART / "tests" / "alerts"
# Where the unit tests look for the rules (their rule_files: ../rules.yaml).
RULES = CHART / "tests" / "rules.yaml"
VALUES: dict[str, Any] = {
    "database": {"urls": [URL]},
    "metrics": {"prometheusRule": {"enabled": True}, "serviceMonitor": {"enabled": True}},
}


def rule_groups() -> dict[str, Any]:
    [rule] = render(VALUES).kinds("PrometheusRule")
    groups: dict[str, Any] = rule["spec"]
    return groups


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in rule_groups()["groups"] for r in group["rules"]}


def write(path: Path = RULES) -> Path:
    path.write_text(yaml.safe_dump(rule_groups(), sort_keys=False, width=1000))
    return path


if __name__ == "__main__":
    print(write())
