"""The worker pod the end-to-end run deploys, and the one the docs show, present a
projected ServiceAccount token for the audience the dispatcher accepts by default, and
mount no token the API server would take."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from chart.chart import CHART, ROOT
from tickwork.core.settings import DispatcherSettings

AUDIENCE = "tickwork"


def _worker_pod() -> dict[str, Any]:
    text = (ROOT / "e2e" / "worker.yaml").read_text()
    [deployment] = [d for d in yaml.safe_load_all(text) if d["kind"] == "Deployment"]
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def _projected_token(pod: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The file the worker reads its token from, and the projection writing it."""
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    path = Path(env["TICKWORK_TOKEN_FILE"])
    [mount] = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == path.parent]
    assert mount.get("readOnly") is True
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    [source] = volume["projected"]["sources"]
    projection: dict[str, Any] = source["serviceAccountToken"]
    assert projection["path"] == path.name
    return str(path), projection


def test_the_e2e_worker_presents_a_token_for_tickwork_only() -> None:
    pod = _worker_pod()
    assert pod["automountServiceAccountToken"] is False
    path, projection = _projected_token(pod)
    assert not path.startswith("/var/run/secrets/kubernetes.io/")
    assert projection["audience"] == AUDIENCE
    assert 600 <= projection["expirationSeconds"] <= 3600 * 24
    # The audience the dispatcher and the chart accept without being told.
    assert DispatcherSettings().kubernetes.audiences == (AUDIENCE,)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["dispatcher"]["authAudiences"] == [AUDIENCE]


def test_the_e2e_run_asks_for_the_same_audience_and_admits_the_workers() -> None:
    check = (ROOT / "e2e" / "check.py").read_text()
    assert f'"--audience={AUDIENCE}"' in check
    run = (ROOT / "e2e" / "run.sh").read_text()
    assert "kubectl label namespace default tickwork.dev/workers=true" in run


def _yaml_blocks(markdown: Path) -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", markdown.read_text(), re.DOTALL)
    return [b for b in map(yaml.safe_load, blocks) if isinstance(b, dict)]


def test_the_docs_show_the_same_pod() -> None:
    """docs/workers.md and docs/operations.md show the e2e worker's token, mount and
    projection."""
    expected_path, expected = _projected_token(_worker_pod())
    for page in ("workers.md", "operations.md"):
        pods = [
            b["spec"]
            for b in _yaml_blocks(ROOT / "docs" / page)
            if "serviceAccountToken" in yaml.safe_dump(b)
        ]
        assert pods, f"docs/{page} shows no projected token"
        for pod in pods:
            assert pod["automountServiceAccountToken"] is False, page
            assert _projected_token(pod) == (expected_path, expected), page
