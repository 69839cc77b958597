"""Draw a `replay.chart.Chart` as one static, self-contained SVG.

No script, no fonts or style sheets to fetch: shapes carry their own presentation
attributes and text uses the generic `sans-serif` and `monospace` families, so the SVG reads
the same pasted alone into a file. Every bar and marker is a `<g>` whose `<title>` names
the reminder id and the event kind (never a body), with `data-*` attributes saying which
row, turn and kind it is, so tests can read the drawing back. Each row is labelled with what
the reminder says (`ReminderTimeline.label`: its tags or key and the first words of its
body) and its id is the label's tooltip. Coordinates are computed from the chart alone: the
same log gives the same bytes.

The grid is laid out for `PAGE_W` pixels, the turns sharing what the labels leave, and the
SVG is drawn `width="100%"` over that view box, so the chart fills the page's width
whatever it is. A session with so many turns that a column would fall below `MIN_COL_W`
gets a wider view box that never shrinks below its own size: the page scrolls it sideways.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from contracts.spec import Authority
from replay.chart import AUTHORITIES, Bar, Chart, Marker, MarkerKind

SVG_NS: Final = "http://www.w3.org/2000/svg"

PAD: Final = 12
HEADER_H: Final = 28
ROW_H: Final = 24
BAR_H: Final = 14
LEGEND_ITEM_W: Final = 180
LEGEND_ROW_H: Final = 22
LABEL_CHARS: Final = 40
#: The mean advance of a 12 px sans-serif character, for sizing the label column.
CHAR_W: Final = 7
ARROW: Final = 7
#: The width the grid is laid out for; the page scales the drawing to its own width.
PAGE_W: Final = 1100
MIN_COL_W: Final = 20

#: (fill, stroke) per authority.
AUTHORITY_COLOURS: Final[dict[Authority, tuple[str, str]]] = {
    "contract": ("#5b8bd6", "#2c5aa0"),
    "corrective": ("#f0a64a", "#b86e10"),
    "advisory": ("#86c286", "#3f8a3f"),
}

#: What each marker kind is called in the legend.
MARKER_LABELS: Final[dict[MarkerKind, str]] = {
    "queued": "queued",
    "fired": "fired (rendered)",
    "delivered": "delivered in the envelope",
    "deduped": "deduped (replaced)",
    "compacted": "kept through compaction",
    "revoked": "revoked",
    "dropped": "dropped",
    "inherited": "inherited from a parent",
    "handed_off": "handed off to a child",
    "provider_evaluated": "provider evaluated",
    "envelope": "envelope (link to its text)",
    "withheld": "held back (shed, muted, not yet due)",
    "deadline": "expired at its deadline",
    "acknowledged": "acknowledged (acted, ignored, dismissed)",
}

_WHITE: Final = 'stroke="#ffffff" stroke-width="0.8"'


def _n(value: float) -> str:
    """A coordinate, written the same way on every machine."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _circle(x: float, y: float, fill: str, stroke: str) -> str:
    return f'<circle cx="{_n(x)}" cy="{_n(y)}" r="4.5" fill="{fill}" {stroke}/>'


def _square(x: float, y: float, fill: str, stroke: str) -> str:
    return (
        f'<rect x="{_n(x - 4.5)}" y="{_n(y - 4.5)}" width="9" height="9" fill="{fill}" {stroke}/>'
    )


def _path(points: list[tuple[float, float]], fill: str, stroke: str) -> str:
    d = " ".join(f"{'M' if i == 0 else 'L'}{_n(px)},{_n(py)}" for i, (px, py) in enumerate(points))
    return f'<path d="{d} Z" fill="{fill}" {stroke}/>'


def _shape(kind: MarkerKind, x: float, y: float, fired: bool | None = None) -> str:
    """The glyph of a marker kind centred on (x, y)."""
    if kind == "queued":
        return _circle(x, y, "#ffffff", 'stroke="#333333" stroke-width="1.5"')
    if kind == "fired":
        return _path([(x, y - 5.5), (x + 5.5, y + 4.5), (x - 5.5, y + 4.5)], "#111111", _WHITE)
    if kind == "delivered":
        return _circle(x, y, "#111111", _WHITE)
    if kind == "deduped":
        a, b, c, d_ = _n(x - 4), _n(x + 4), _n(y - 4), _n(y + 4)
        d = f"M{a},{c} L{b},{d_} M{b},{c} L{a},{d_}"
        return (
            f'<path d="{d}" stroke="#ffffff" stroke-width="4.5" fill="none"/>'
            f'<path d="{d}" stroke="#c62828" stroke-width="2.5" fill="none"/>'
        )
    if kind == "compacted":
        return _path([(x, y - 6), (x + 6, y), (x, y + 6), (x - 6, y)], "#6a1b9a", _WHITE)
    if kind == "revoked":
        return _square(x, y, "#c62828", _WHITE)
    if kind == "dropped":
        return _path([(x - 5.5, y - 4.5), (x + 5.5, y - 4.5), (x, y + 5.5)], "#c62828", _WHITE)
    if kind == "inherited":
        return _path([(x - 4.5, y - 5.5), (x + 5.5, y), (x - 4.5, y + 5.5)], "#00796b", _WHITE)
    if kind == "handed_off":
        return _path(
            [(x - 4.5, y - 5.5), (x + 5.5, y), (x - 4.5, y + 5.5)],
            "#ffffff",
            'stroke="#00796b" stroke-width="1.5"',
        )
    if kind == "withheld":
        return _circle(
            x, y, "#ffffff", 'stroke="#9e9e9e" stroke-width="1.5" stroke-dasharray="2,1.5"'
        )
    if kind == "deadline":
        return _path(
            [(x - 5, y - 5), (x + 5, y - 5), (x - 5, y + 5), (x + 5, y + 5)],
            "#ffffff",
            'stroke="#c62828" stroke-width="1.5"',
        )
    if kind == "acknowledged":
        return (
            f'<path d="M{_n(x - 5)},{_n(y)} L{_n(x - 1.5)},{_n(y + 4)} L{_n(x + 5.5)},{_n(y - 5)}" '
            'fill="none" stroke="#2e7d32" stroke-width="2.5"/>'
        )
    if kind == "provider_evaluated":
        if fired:
            return _square(x, y, "#795548", _WHITE)
        return _square(x, y, "#ffffff", 'stroke="#795548" stroke-width="1.5"')
    # envelope
    left, top, right = x - 6.5, y - 4.5, x + 6.5
    return (
        f'<rect x="{_n(left)}" y="{_n(top)}" width="13" height="9" fill="#ffffff" '
        f'stroke="#333333" stroke-width="1.2"/>'
        f'<path d="M{_n(left)},{_n(top)} L{_n(x)},{_n(y + 0.5)} L{_n(right)},{_n(top)}" '
        f'fill="none" stroke="#333333" stroke-width="1.2"/>'
    )


@dataclass(frozen=True)
class Layout:
    """Where things go; a pure function of the chart's shape."""

    label_w: int
    col_w: int
    n_cols: int
    n_rows: int
    first_turn: int

    @property
    def grid_x(self) -> int:
        return PAD + self.label_w

    @property
    def grid_y(self) -> int:
        return PAD + HEADER_H

    @property
    def grid_w(self) -> int:
        return self.n_cols * self.col_w

    @property
    def grid_h(self) -> int:
        return self.n_rows * ROW_H

    @property
    def width(self) -> int:
        return max(self.grid_x + self.grid_w + PAD + ARROW + 4, PAGE_W)

    def col_x(self, turn: int) -> int:
        return self.grid_x + (turn - self.first_turn) * self.col_w

    def row_y(self, index: int) -> int:
        return self.grid_y + index * ROW_H


def layout(chart: Chart) -> Layout:
    """The labels take what their longest needs (up to `LABEL_CHARS`); the turns share the
    rest of `PAGE_W` equally, each at least `MIN_COL_W` wide."""
    labels = [row.label for row in chart.rows] + ["provider evaluations"]
    chars = min(LABEL_CHARS, max(len(label) for label in labels))
    label_w = chars * CHAR_W + 16
    n_cols = max(1, len(chart.turns))
    room = PAGE_W - 2 * PAD - label_w - ARROW - 4
    return Layout(
        label_w=label_w,
        col_w=max(MIN_COL_W, room // n_cols),
        n_cols=n_cols,
        n_rows=len(chart.rows) + 2,
        first_turn=chart.turns[0] if chart.turns else 0,
    )


def _label(text: str, tooltip: str | None = None) -> str:
    """A row label cut to `LABEL_CHARS`; the tooltip (or the whole text) on hover."""
    shown = text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1].rstrip() + "…"
    hover = tooltip if tooltip is not None else (text if shown != text else None)
    return (f"<title>{_e(hover)}</title>" if hover else "") + _e(shown)


def _markers(markers: tuple[Marker, ...], lay: Layout, y_mid: float, out: list[str]) -> None:
    """Each cell's markers spread evenly across the cell, in log order."""
    cells: dict[int, list[Marker]] = {}
    for marker in markers:
        cells.setdefault(marker.turn, []).append(marker)
    for turn, group in cells.items():
        for i, marker in enumerate(group):
            x = lay.col_x(turn) + lay.col_w * (2 * i + 1) / (2 * len(group))
            who = f' data-reminder="{_e(marker.reminder_id)}"' if marker.reminder_id else ""
            glyph = _shape(marker.kind, x, y_mid, marker.fired)
            if marker.kind == "envelope":
                glyph = f'<a href="#envelope-{marker.session_seq}">{glyph}</a>'
            out.append(
                f'<g class="marker" data-kind="{marker.kind}" data-turn="{turn}" '
                f'data-seq="{marker.session_seq}"{who}><title>{_e(marker.title)}</title>'
                f"{glyph}</g>"
            )


def _bar(bar: Bar, lay: Layout, y: int, out: list[str]) -> None:
    fill, stroke = AUTHORITY_COLOURS[bar.authority]
    x1 = lay.col_x(bar.first_turn) + 2
    x2 = lay.col_x(bar.last_turn) + lay.col_w - 2
    top, mid = y + (ROW_H - BAR_H) // 2, y + ROW_H / 2
    ended = _e(bar.ended_by) if bar.ended_by else "live"
    parts = [
        f'<g class="bar" data-reminder="{_e(bar.reminder_id)}" data-authority="{bar.authority}" '
        f'data-first-turn="{bar.first_turn}" data-last-turn="{bar.last_turn}" '
        f'data-ended="{ended}"><title>{_e(bar.title)}</title>'
    ]
    if bar.queued_turn is not None and bar.queued_turn < bar.first_turn:
        qx = lay.col_x(bar.queued_turn) + lay.col_w / 2
        parts.append(
            f'<path class="waiting" d="M{_n(qx)},{_n(mid)} L{x1},{_n(mid)}" stroke="{stroke}" '
            f'stroke-width="2" stroke-dasharray="4 3" fill="none"/>'
        )
    if not bar.injected:
        look = f'fill="#ffffff" stroke="{stroke}" stroke-width="1.5" stroke-dasharray="4 3"'
    elif bar.audit_only:
        look = f'fill="{fill}" fill-opacity="0.3" stroke="{stroke}" stroke-width="1"'
    else:
        look = f'fill="{fill}" stroke="{stroke}" stroke-width="1"'
    parts.append(f'<rect x="{x1}" y="{top}" width="{x2 - x1}" height="{BAR_H}" rx="3" {look}/>')
    if bar.ended_by is None:
        parts.append(
            f'<path class="still-live" d="M{x2 + 1},{top} L{x2 + 1 + ARROW},{_n(mid)} '
            f'L{x2 + 1},{top + BAR_H} Z" fill="{stroke}"/>'
        )
    parts.append("</g>")
    out.append("".join(parts))


def _marker_glyph(kind: MarkerKind, x: float, y: float) -> str:
    return _shape(kind, x, y)


def _legend(lay: Layout, top: int, out: list[str]) -> int:
    """The legend under the grid; returns its height."""
    items: list[tuple[str, Callable[[float, float], str]]] = []
    for authority in AUTHORITIES:
        fill, stroke = AUTHORITY_COLOURS[authority]

        def swatch(x: float, y: float, fill: str = fill, stroke: str = stroke) -> str:
            return (
                f'<rect x="{_n(x - 10)}" y="{_n(y - 6)}" width="20" height="12" rx="3" '
                f'fill="{fill}" stroke="{stroke}"/>'
            )

        items.append((f"{authority} authority", swatch))
    grey_fill, grey = "#bbbbbb", "#666666"
    items.append(
        (
            "still live at the end",
            lambda x, y: (
                f'<rect x="{_n(x - 10)}" y="{_n(y - 6)}" width="16" height="12" rx="3" '
                f'fill="{grey_fill}" stroke="{grey}"/><path d="M{_n(x + 7)},{_n(y - 6)} '
                f'L{_n(x + 14)},{_n(y)} L{_n(x + 7)},{_n(y + 6)} Z" fill="{grey}"/>'
            ),
        )
    )
    items.append(
        (
            "audit only (never rendered)",
            lambda x, y: (
                f'<rect x="{_n(x - 10)}" y="{_n(y - 6)}" width="20" height="12" rx="3" '
                f'fill="{grey_fill}" fill-opacity="0.3" stroke="{grey}"/>'
            ),
        )
    )
    items.append(
        (
            "queued (dashed: waiting)",
            lambda x, y: (
                f'<rect x="{_n(x - 10)}" y="{_n(y - 6)}" width="20" height="12" rx="3" '
                f'fill="#ffffff" stroke="{grey}" stroke-width="1.5" stroke-dasharray="4 3"/>'
            ),
        )
    )
    for kind in (k for k in MARKER_LABELS if k != "provider_evaluated"):
        items.append((MARKER_LABELS[kind], partial(_marker_glyph, kind)))
    items.append(
        ("provider evaluated: fired", lambda x, y: _shape("provider_evaluated", x, y, True))
    )
    items.append(
        ("provider evaluated: quiet", lambda x, y: _shape("provider_evaluated", x, y, False))
    )
    per_line = max(1, (lay.width - 2 * PAD) // LEGEND_ITEM_W)
    out.append('<g class="legend">')
    for i, (text, glyph) in enumerate(items):
        x = PAD + (i % per_line) * LEGEND_ITEM_W + 12
        y = top + (i // per_line) * LEGEND_ROW_H + LEGEND_ROW_H / 2
        out.append(
            f'<g class="legend-item">{glyph(x, y)}<text x="{_n(x + 18)}" y="{_n(y + 4)}" '
            f'font-size="11" fill="#333333">{_e(text)}</text></g>'
        )
    out.append("</g>")
    return ((len(items) + per_line - 1) // per_line) * LEGEND_ROW_H


def chart_svg(chart: Chart, session_id: str, *, inline: bool = False) -> str:
    """The SVG document of a chart; `inline` leaves out the namespace, which HTML implies.

    (An HTML page then holds no URL at all, not even the SVG namespace name.)
    """
    lay = layout(chart)
    body: list[str] = []
    # Column stripes and turn numbers; a turn with an envelope links to its text.
    first_envelope: dict[int, int] = {}
    for envelope in chart.envelopes:
        first_envelope.setdefault(envelope.turn, envelope.session_seq)
    body.append(f'<text x="{PAD}" y="{PAD + 18}" font-size="11" fill="#666666">turn →</text>')
    for i, turn in enumerate(chart.turns):
        x = lay.col_x(turn)
        shade = "#f3f3ee" if i % 2 == 0 else "#ffffff"
        label = (
            f'<text x="{_n(x + lay.col_w / 2)}" y="{PAD + 18}" text-anchor="middle" '
            f'font-size="12" font-weight="bold" fill="#222222">{turn}</text>'
        )
        if turn in first_envelope:
            label = f'<a href="#envelope-{first_envelope[turn]}">{label}</a>'
        body.append(
            f'<g class="col" data-turn="{turn}"><rect x="{x}" y="{lay.grid_y}" '
            f'width="{lay.col_w}" height="{lay.grid_h}" fill="{shade}"/>{label}</g>'
        )
    # Row labels and separators: the envelopes lane, one row per reminder, the providers lane.
    labels: list[tuple[str, str | None]] = [
        ("envelopes", None),
        *((row.label, row.reminder_id) for row in chart.rows),
        ("provider evaluations", None),
    ]
    for index, (text, reminder_id) in enumerate(labels):
        y = lay.row_y(index)
        style = 'fill="#222222" class="row-label"'
        if reminder_id is None:
            style = 'font-style="italic" fill="#666666"'
        body.append(
            f'<text x="{PAD}" y="{y + 16}" font-size="12" {style}>'
            f"{_label(text, reminder_id)}</text>"
            f'<line x1="{PAD}" y1="{y + ROW_H}" x2="{lay.grid_x + lay.grid_w}" '
            f'y2="{y + ROW_H}" stroke="#dddddd" stroke-width="1"/>'
        )
    body.append(
        f'<line x1="{lay.grid_x}" y1="{lay.grid_y}" x2="{lay.grid_x}" '
        f'y2="{lay.grid_y + lay.grid_h}" stroke="#999999" stroke-width="1"/>'
    )
    _markers(chart.session_markers, lay, lay.row_y(0) + ROW_H / 2, body)
    for index, row in enumerate(chart.rows, start=1):
        y = lay.row_y(index)
        body.append(f'<g class="row" data-reminder="{_e(row.reminder_id)}" data-index="{index}">')
        for bar in row.bars:
            _bar(bar, lay, y, body)
        _markers(row.markers, lay, y + ROW_H / 2, body)
        body.append("</g>")
    _markers(chart.providers, lay, lay.row_y(len(labels) - 1) + ROW_H / 2, body)
    legend_top = lay.grid_y + lay.grid_h + 14
    legend_h = _legend(lay, legend_top, body)
    height = legend_top + legend_h + PAD
    bars = len(chart.bars)
    namespace = "" if inline else f' xmlns="{SVG_NS}"'
    # Fill the page's width (the height follows the view box); a drawing wider than PAGE_W
    # (many turns) never shrinks below its own size: the page scrolls it instead.
    size = 'width="100%"'
    if lay.width > PAGE_W:
        size += f' style="min-width:{lay.width}px"'
    head = (
        f'<svg{namespace} class="reminder-chart" {size} '
        f'viewBox="0 0 {lay.width} {height}" font-family="sans-serif" '
        f'aria-labelledby="chart-title chart-desc">'
        f'<title id="chart-title">Reminders of session {_e(session_id)}, turn by turn</title>'
        f'<desc id="chart-desc">{len(chart.rows)} reminder(s), {bars} bar(s), turns '
        f"{chart.turns[0] if chart.turns else 0} to {chart.turns[-1] if chart.turns else 0}. "
        "Each bar runs from the turn a reminder was injected to the turn it expired, "
        "coloured by authority; markers show what happened to it in each turn.</desc>"
        f'<rect x="0" y="0" width="{lay.width}" height="{height}" fill="#ffffff"/>'
    )
    return head + "\n".join(body) + "</svg>"
