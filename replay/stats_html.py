"""The effect report (SPEC §12.6) as one self-contained HTML page: an SVG chart of what
became of each row's reminders beside the tokens they cost, then the table of every count.
No scripts, no fetches; every text escaped."""

from __future__ import annotations

import html
from typing import Any

#: Outcome segments of a row's bar, in drawing order, with their colours.
SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("acted", "acted", "#3a8f4b"),
    ("ignored", "ignored", "#9a9a9a"),
    ("dismissed", "dismissed", "#d08a2c"),
    ("expired_unacknowledged", "expired unacknowledged", "#c0392b"),
    ("open", "no outcome yet", "#dfe6ee"),
)
_LABEL_W = 360
_BAR_W = 520
_ROW_H = 26
_TOP = 40


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def row_name(row: dict[str, Any]) -> str:
    """`source · provider · tag`, with `—` where there is none."""
    return " · ".join(
        str(part) if part is not None else "—"
        for part in (row["source"], row["provider_id"], row["tag"])
    )


def _segments(row: dict[str, Any]) -> list[tuple[str, int]]:
    acknowledged = row["acknowledged"]
    parts = [(name, int(acknowledged[name])) for name in ("acted", "ignored", "dismissed")]
    parts.append(("expired_unacknowledged", int(row["expired_unacknowledged"])))
    parts.append(("open", max(0, int(row["injected"]) - sum(n for _, n in parts))))
    return parts


def chart_svg(report: dict[str, Any]) -> str:
    """One bar per row: its reminders' outcomes, and the tokens spent written beside it."""
    rows = report["rows"]
    height = _TOP + _ROW_H * max(1, len(rows)) + 30
    width = _LABEL_W + _BAR_W + 200
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="effect-chart" viewBox="0 0 {width} '
        f'{height}" width="100%" role="img" aria-label="What became of the reminders per row">'
    ]
    x = _LABEL_W
    for _name, label, colour in SEGMENTS:
        out.append(
            f'<rect x="{x}" y="8" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 16}" y="18" font-size="12">{_e(label)}</text>'
        )
        x += 30 + 7 * len(label)
    for index, row in enumerate(rows):
        y = _TOP + index * _ROW_H
        segments = _segments(row)
        total = max(1, sum(n for _, n in segments))
        out.append(
            f'<g class="effect-row" data-row="{_e(row_name(row))}">'
            f'<text x="{_LABEL_W - 8}" y="{y + 16}" font-size="12" text-anchor="end">'
            f"{_e(row_name(row))}</text>"
        )
        left = float(_LABEL_W)
        for name, count in segments:
            if not count:
                continue
            colour = next(c for n, _, c in SEGMENTS if n == name)
            span = _BAR_W * count / total
            out.append(
                f'<rect class="segment" data-outcome="{name}" data-count="{count}" '
                f'x="{left:.1f}" y="{y + 4}" width="{span:.1f}" height="{_ROW_H - 8}" '
                f'fill="{colour}"><title>{_e(name)}: {count}</title></rect>'
            )
            left += span
        out.append(
            f'<text x="{_LABEL_W + _BAR_W + 8}" y="{y + 16}" font-size="12">'
            f"{row['rendered']} deliveries · {row['est_tokens']} tokens</text></g>"
        )
    if not rows:
        out.append(f'<text x="{_LABEL_W}" y="{_TOP + 16}" font-size="12">No reminders.</text>')
    out.append("</svg>")
    return "".join(out)


_COLUMNS = (
    "injected",
    "rendered",
    "est_tokens",
    "withheld",
    "acknowledged",
    "expired_unacknowledged",
    "median_turns_to_ack",
)


def _cell(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return "—" if value is None else str(value)


def stats_html(report: dict[str, Any], title: str) -> str:
    """The page: a summary line, the chart, the table (rows, then the totals)."""
    head = "".join(f"<th>{_e(name)}</th>" for name in ("source · provider · tag", *_COLUMNS))
    body = []
    for row in report["rows"]:
        cells = "".join(f"<td>{_e(_cell(row[name]))}</td>" for name in _COLUMNS)
        body.append(f'<tr class="row"><td>{_e(row_name(row))}</td>{cells}</tr>')
    totals = report["totals"]
    cells = "".join(f"<td>{_e(_cell(totals[name]))}</td>" for name in _COLUMNS)
    body.append(f'<tr class="totals"><th>all reminders</th>{cells}</tr>')
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en"><head><meta charset="utf-8">',
                f"<title>{_e(title)}</title>",
                "<style>body{font-family:system-ui,sans-serif;margin:2rem;color:#222}"
                "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.3rem;"
                "font-size:.85rem;text-align:left}figure{margin:1rem 0}</style></head><body>",
                f"<h1>{_e(title)}</h1>",
                f'<p id="summary">{report["sessions"]} session(s) · '
                f"{totals['injected']} reminder(s) injected · {totals['rendered']} deliveries · "
                f"{totals['est_tokens']} tokens</p>",
                f"<figure>{chart_svg(report)}</figure>",
                f'<table id="effect-table"><tr>{head}</tr>',
                *body,
                "</table></body></html>",
            ]
        )
        + "\n"
    )
