"""A static HTML view of the Grafana dashboard, drawn from a real Prometheus: each panel of
deploy/grafana/dashboards at its grid position, its queries read with `query_range` and drawn
as SVG lines (a stat panel as its last value). No Grafana runs here, so this is what the
screenshot in docs/operations.md shows, taken with headless Chromium
(tests/e2e/test_prometheus.py; set REMINDERS_DASHBOARD_PNG to keep the image)."""

from __future__ import annotations

import html
import json
import math
import re
import urllib.parse
import urllib.request
from typing import Any

from tests.grafana_dashboard import PanelQuery, dashboards, panels

COLOURS = ("#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0")
ROW_PX = 34
WIDTH_PX = 1600
Series = tuple[str, list[tuple[float, float]]]


def query_range(base: str, expr: str, start: float, end: float, step: float) -> list[Any]:
    """The matrix Prometheus answers for `expr` over [start, end]."""
    params = {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
    url = f"{base}/api/v1/query_range?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    return list(body["data"]["result"])


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's `{{label}}` legend format filled in."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def panel_series(base: str, panel: dict[str, Any], start: float, end: float) -> list[Series]:
    """Every line of a panel: (legend, [(time, value)]) with NaN points left out."""
    found: list[Series] = []
    for target in panel["targets"]:
        query = PanelQuery("", panel["title"], target["refId"], target["expr"])
        for result in query_range(base, query.evaluable(), start, end, step=1):
            points = [(float(t), float(v)) for t, v in result["values"] if math.isfinite(float(v))]
            name = legend(target.get("legendFormat", ""), result["metric"]) or target["expr"]
            found.append((name, points))
    return found


def _number(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"
    if unit in ("reqps", "ops"):
        return f"{value:.3g}/s"
    return f"{value:.4g}"


def stat_svg(series: list[Series], unit: str) -> str:
    """A stat panel: the sum of the last values, large."""
    last = sum(points[-1][1] for _, points in series if points)
    return (
        '<svg viewBox="0 0 300 90" class="stat"><text x="150" y="62" text-anchor="middle">'
        f"{html.escape(_number(last, unit))}</text></svg>"
    )


def timeseries_svg(series: list[Series], unit: str, start: float, end: float) -> str:
    """A time series panel: one polyline per series on shared axes, legend below."""
    values = [v for _, points in series for _, v in points] or [0.0]
    top = max(max(values), 1e-9) * 1.1
    width, height, left = 740.0, 230.0, 70.0
    out = [f'<svg viewBox="0 0 {width:.0f} {height + 8:.0f}" class="series">']
    for fraction in (0.0, 0.5, 1.0):
        y = height - fraction * (height - 10)
        out.append(f'<line x1="{left}" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        label = html.escape(_number(top * fraction, unit))
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    span = max(end - start, 1.0)
    for index, (_, points) in enumerate(series):
        coords = " ".join(
            f"{left + (t - start) / span * (width - left):.1f},"
            f"{height - v / top * (height - 10):.1f}"
            for t, v in points
        )
        colour = COLOURS[index % len(COLOURS)]
        out.append(f'<polyline points="{coords}" stroke="{colour}" class="line"/>')
    out.append("</svg>")
    keys = "".join(
        f'<span><i style="background:{COLOURS[i % len(COLOURS)]}"></i>{html.escape(name)}</span>'
        for i, (name, _) in enumerate(series)
    )
    return "".join(out) + f'<div class="legend">{keys}</div>'


STYLE = """
body { background:#111217; color:#ccccdc; font:13px sans-serif; margin:0; padding:12px; }
h1 { font-size:18px; margin:0 0 10px; }
.grid-24 { display:grid; grid-template-columns:repeat(24, 1fr); grid-auto-rows:{row}px; gap:8px; }
.panel { background:#181b1f; border:1px solid #2c3235; border-radius:3px; padding:6px 8px;
         overflow:hidden; }
.panel h2 { font-size:13px; margin:0 0 4px; font-weight:500; }
svg { width:100%; } svg text { fill:#8e8e9a; font-size:11px; }
.stat text { fill:#73bf69; font-size:44px; font-weight:600; }
.grid { stroke:#2c3235; } .line { fill:none; stroke-width:1.6; }
.legend span { margin-right:12px; white-space:nowrap; font-size:11px; }
.legend i { display:inline-block; width:10px; height:3px; margin:0 4px 3px 0; }
""".replace("{row}", str(ROW_PX))


def dashboard_html(base: str, start: float, end: float) -> str:
    """Every dashboard, each panel drawn from Prometheus over [start, end]."""
    sections = []
    for dashboard in dashboards().values():
        cells = []
        for panel in panels(dashboard):
            grid = panel["gridPos"]
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
            series = panel_series(base, panel, start, end)
            body = (
                stat_svg(series, unit)
                if panel["type"] == "stat"
                else timeseries_svg(series, unit, start, end)
            )
            place = (
                f"grid-column:{grid['x'] + 1} / span {grid['w']};"
                f"grid-row:{grid['y'] + 1} / span {grid['h']}"
            )
            cells.append(
                f'<div class="panel" style="{place}"><h2>{html.escape(panel["title"])}</h2>'
                f"{body}</div>"
            )
        title = html.escape(dashboard["title"])
        sections.append(f'<h1>{title}</h1><div class="grid-24">{"".join(cells)}</div>')
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><style>{STYLE}</style></head>'
        f'<body style="width:{WIDTH_PX - 24}px">{"".join(sections)}</body></html>'
    )


def page_height() -> int:
    """Pixels the dashboards' grids need (for the screenshot's window size)."""
    rows = max(
        (p["gridPos"]["y"] + p["gridPos"]["h"] for d in dashboards().values() for p in panels(d)),
        default=1,
    )
    return rows * (ROW_PX + 8) + 60
