"""The Grafana dashboard queries only metrics the servers really register (scraped from live servers)."""

from __future__ import annotations

import json
import re

import pytest

from tests.deploy.chart_util import CHART
from tests.deploy.servers import SERVICES, metric_families, running

DASHBOARD = CHART / "dashboards" / "burrow.json"
METRIC = re.compile(r"\bburrow_[a-z0-9_]+\b")


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def test_dashboard_is_well_formed():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and panel["description"]
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
    assert {v["name"] for v in dash["templating"]["list"]} >= {"datasource"}
    # every service has panels
    names = {m for _title, expr in dashboard_queries() for m in METRIC.findall(expr)}
    for service in SERVICES:
        assert any(n.startswith(f"burrow_{service}_") for n in names), service


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_dashboard_metrics_exist(service, tmp_path):
    wanted = {(title, m) for title, expr in dashboard_queries() for m in METRIC.findall(expr)
              if m.startswith(f"burrow_{service}_")}
    assert wanted
    with running(service, tmp_path) as url:
        exposed = metric_families(url)
    missing = sorted(f"{m} (panel {title!r})" for title, m in wanted if m not in exposed)
    assert not missing, f"dashboard queries metrics {service} does not expose: {missing}"
