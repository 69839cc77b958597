"""The Grafana dashboard (deploy/grafana) is well formed, shipped the same way everywhere,
and every panel's PromQL parses (promtool); tests/e2e/test_prometheus.py evaluates each one
against a real Prometheus scraping `reminders up --demo`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.grafana_dashboard import DASHBOARD_DIR, ROOT, dashboards, panel_queries, panels

GRAFANA = ROOT / "deploy" / "grafana"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def test_every_panel_has_a_unique_title_and_queries_the_dashboards_datasource() -> None:
    for name, dashboard in dashboards().items():
        found = panels(dashboard)
        assert found, name
        titles = [panel["title"] for panel in found]
        assert len(titles) == len(set(titles)), titles
        assert len({panel["id"] for panel in found}) == len(found)
        (variable,) = dashboard["templating"]["list"]
        assert variable["type"] == "datasource" and variable["name"] == "datasource"
        for panel in found:
            assert panel["datasource"] == DATASOURCE, panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["datasource"] == DATASOURCE and target["expr"].strip(), panel


def test_every_panel_query_parses_with_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is absent (apt-get install prometheus; .ci/run tries to)")
    queries = panel_queries()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{n}", "expr": query.evaluable()}
                    for n, query in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(queries)} rules found" in result.stdout


def test_kubernetes_ships_the_same_dashboard_as_a_labelled_config_map() -> None:
    shipped = (DASHBOARD_DIR / "reminder-ledger.json").read_bytes()
    assert (ROOT / "k8s/base/grafana-dashboard.json").read_bytes() == shipped
    kustomization = yaml.safe_load((ROOT / "k8s/base/kustomization.yaml").read_text("utf-8"))
    (generator,) = [
        g for g in kustomization["configMapGenerator"] if g["name"] == "grafana-dashboards"
    ]
    assert generator["files"] == ["reminder-ledger.json=grafana-dashboard.json"]
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}


def test_compose_provisions_grafana_with_the_dashboard_and_the_compose_prometheus() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    grafana = compose["services"]["grafana"]
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in grafana["volumes"]}
    assert mounts["/var/lib/grafana/dashboards"] == "./deploy/grafana/dashboards"
    for target in ("datasources", "dashboards"):
        source = mounts[f"/etc/grafana/provisioning/{target}"]
        assert (ROOT / source).is_dir() and any((ROOT / source).glob("*.yml")), source
    datasources = yaml.safe_load(
        (GRAFANA / "provisioning/datasources/prometheus.yml").read_text(encoding="utf-8")
    )
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    providers = yaml.safe_load(
        (GRAFANA / "provisioning/dashboards/reminder-ledger.yml").read_text(encoding="utf-8")
    )
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    assert "prometheus" in compose["services"] and "grafana-data" in compose["volumes"]
