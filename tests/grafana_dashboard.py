"""The Grafana dashboards of deploy/grafana/dashboards, read as tests need them: every panel's
PromQL with Grafana's own variables replaced, so Prometheus or promtool can evaluate it. A
panel added to a dashboard is checked by every test that uses this, with nothing to list."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_DIR = ROOT / "deploy" / "grafana" / "dashboards"


@dataclass(frozen=True)
class PanelQuery:
    """One query of one panel."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str

    def evaluable(self, rate_interval: str = "30s") -> str:
        """The PromQL with Grafana's interval variables replaced by fixed windows."""
        return (
            self.expr.replace("$__rate_interval", rate_interval)
            .replace("$__interval", rate_interval)
            .replace("$__range", rate_interval)
        )

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}: {self.expr}"


def dashboards() -> dict[str, dict[str, Any]]:
    """Every dashboard JSON, by file name."""
    return {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(DASHBOARD_DIR.glob("*.json"))
    }


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included (rows themselves are not panels)."""
    found: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            found.extend(panels(panel))
        else:
            found.append(panel)
    return found


def panel_queries() -> list[PanelQuery]:
    """Every query of every panel of every dashboard."""
    return [
        PanelQuery(name, panel["title"], target.get("refId", "?"), target.get("expr", ""))
        for name, dashboard in dashboards().items()
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]
