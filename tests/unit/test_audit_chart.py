"""The audit chart of `replay --format html` (issue #13): its data, its SVG, its page.

The chart's data (`replay.chart.chart`) is checked against the golden logs and against the
replayed state; the SVG (`replay.svg.chart_svg`) is read back as XML and checked for
structure — which bar is in which row and column, which marker in which cell — not pixels.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings

from contracts import events as ev
from replay.chart import LABEL_WORDS, MARKER_KINDS, Chart, chart, row_label
from replay.engine import ReplayResult, replay
from replay.report import html_report
from replay.source import rows_from_file
from replay.svg import AUTHORITY_COLOURS, LABEL_CHARS, MIN_COL_W, PAGE_W, ROW_H, chart_svg, layout
from tests.golden.regen import GOLDEN_DIR
from tests.support import Driver
from tests.unit.test_properties import SEQUENCE_SETTINGS, Script, run, scripts, show
from tests.unit.test_replay_library import rows_of

NS = {"svg": "http://www.w3.org/2000/svg"}
GOLDEN = sorted(GOLDEN_DIR.glob("*.events.jsonl"))
ENDS = (ev.Expired, ev.Deduped, ev.Dropped, ev.Revoked)


def replayed(path: Path) -> ReplayResult:
    return replay(rows_from_file(path))


def session_of(result: ReplayResult) -> str:
    return result.events[0].session_id


def ever_live_or_queued(events: list[ev.Event]) -> list[str]:
    ids: list[str] = []
    for event in events:
        p = event.payload
        found = p.reminder.id if isinstance(p, ev.Queued) else None
        found = p.reminder_id if isinstance(p, ev.Injected) else found
        if found is not None and found not in ids:
            ids.append(found)
    return ids


def removal_turn(events: list[ev.Event], reminder_id: str) -> int | None:
    """The turn of the event that took the reminder out of the session, if one did."""
    for event in events:
        p = event.payload
        if isinstance(p, ev.Deduped) and reminder_id in p.replaced_ids:
            return event.turn
        if isinstance(p, ENDS) and not isinstance(p, ev.Deduped) and p.reminder_id == reminder_id:
            return event.turn
    return None


def start_turn(events: list[ev.Event], reminder_id: str) -> int:
    injected = [
        e.turn
        for e in events
        if isinstance(e.payload, ev.Injected) and e.payload.reminder_id == reminder_id
    ]
    queued = [
        e.turn
        for e in events
        if isinstance(e.payload, ev.Queued) and e.payload.reminder.id == reminder_id
    ]
    return (injected or queued)[0]


def svg_tree(drawn: Chart, session_id: str = "s") -> ET.Element:
    return ET.fromstring(chart_svg(drawn, session_id))


def groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{{{NS['svg']}}}g") if g.get("class") == cls]


def title_of(element: ET.Element) -> str:
    title = element.find("svg:title", NS)
    assert title is not None and title.text, ET.tostring(element)
    return title.text


# ---------------------------------------------------------------------------------------------
# The chart as data, against the golden logs.


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_one_bar_per_reminder_ever_live_or_queued_from_injection_to_expiry(path: Path) -> None:
    result = replayed(path)
    drawn = chart(result.events)
    ids = ever_live_or_queued(result.events)
    assert [row.reminder_id for row in drawn.rows] == ids
    assert len(drawn.bars) == len(ids)
    last = result.events[-1].turn
    for bar in drawn.bars:
        assert bar.first_turn == start_turn(result.events, bar.reminder_id)
        removed = removal_turn(result.events, bar.reminder_id)
        assert bar.last_turn == (last if removed is None else removed)
        assert (bar.ended_by is None) == (removed is None)
        assert bar.first_turn <= bar.last_turn


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_the_bars_still_open_are_exactly_the_replayed_live_and_queued_reminders(
    path: Path,
) -> None:
    result = replayed(path)
    drawn = chart(result.events)
    still = {bar.reminder_id for bar in drawn.bars if bar.ended_by is None}
    state = result.state
    assert still == {row.spec.id for row in state.pending} | {r.reminder.id for r in state.queued}
    audit = {bar.reminder_id for bar in drawn.bars if bar.audit_only}
    assert audit == {row.spec.id for row in state.pending if row.audit_only}
    for bar in drawn.bars:
        if bar.injected:
            injected = next(
                e.payload
                for e in result.events
                if isinstance(e.payload, ev.Injected) and e.payload.reminder_id == bar.reminder_id
            )
            assert bar.authority == injected.authority


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_markers_sit_in_the_column_of_their_event(path: Path) -> None:
    result = replayed(path)
    drawn = chart(result.events)
    by_id = {row.reminder_id: row for row in drawn.rows}
    for event in result.events:
        p = event.payload
        expected: list[tuple[str, str]] = []
        if isinstance(p, ev.Fired):
            expected = [(p.reminder_id, "fired")]
        elif isinstance(p, ev.Delivered):
            expected = [(d, "delivered") for d in p.directive_ids]
        elif isinstance(p, ev.Queued):
            expected = [(p.reminder.id or "", "queued")]
        elif isinstance(p, ev.Compacted):
            expected = [(k, "compacted") for k in p.preserved_ids]
        elif isinstance(p, ev.HandedOff):
            expected = [(k, "handed_off") for k in p.propagated_ids]
        elif isinstance(p, ev.Deduped):
            expected = [(k, "deduped") for k in p.replaced_ids]
        elif isinstance(p, ev.Revoked | ev.Dropped | ev.Inherited):
            expected = [(p.reminder_id, event.kind)]
        for reminder_id, kind in expected:
            found = [
                m
                for m in by_id[reminder_id].markers
                if m.session_seq == event.session_seq and m.kind == kind
            ]
            assert len(found) == 1, (event.session_seq, reminder_id, kind)
            assert found[0].turn == event.turn
            assert reminder_id in found[0].title and kind in found[0].title
    delivered = [e for e in result.events if isinstance(e.payload, ev.Delivered)]
    assert [(x.turn, x.session_seq) for x in drawn.envelopes] == [
        (e.turn, e.session_seq) for e in delivered
    ]
    assert [x.text for x in drawn.envelopes] == [
        e.payload.text for e in delivered if isinstance(e.payload, ev.Delivered)
    ]


def test_compaction_and_handoff_draws_what_the_trail_says() -> None:
    drawn = chart(replayed(GOLDEN_DIR / "compaction_and_handoff.events.jsonl").events)
    assert drawn.turns == (0, 1, 2, 3)  # turn 2 saw no event and still has its column
    spans = {b.reminder_id: (b.first_turn, b.last_turn, b.ended_by) for b in drawn.bars}
    assert spans == {
        "rule-1": (0, 3, None),
        "tp-1": (0, 3, "expired (ttl)"),
        "trunc-1": (0, 0, "expired (ttl)"),
        "style-1": (0, 0, "expired (compaction)"),
    }
    rule = next(row for row in drawn.rows if row.reminder_id == "rule-1")
    assert [(m.turn, m.kind) for m in rule.markers] == [
        (0, "fired"),
        (0, "delivered"),
        (0, "compacted"),
        (1, "fired"),
        (1, "delivered"),
        (1, "handed_off"),
        (3, "compacted"),
    ]
    assert [(m.turn, m.kind) for m in drawn.session_markers] == [
        (0, "envelope"),
        (0, "compacted"),
        (1, "envelope"),
        (3, "compacted"),
    ]


def test_queues_and_seams_draws_the_queue_the_revocation_and_the_audit_only_drain() -> None:
    drawn = chart(replayed(GOLDEN_DIR / "queues_and_seams.events.jsonl").events)
    bars = {bar.reminder_id: bar for bar in drawn.bars}
    assert not bars["gone-1"].injected and bars["gone-1"].ended_by == "revoked"
    assert (bars["audit-1"].queued_turn, bars["audit-1"].first_turn) == (0, 1)
    assert bars["audit-1"].audit_only and bars["audit-1"].ended_by is None
    assert bars["file-1"].ended_by == "deduped" and bars["spoof-1"].ended_by == "dropped"
    assert (bars["spoof-1"].first_turn, bars["spoof-1"].last_turn) == (0, 1)


def test_a_command_labelled_with_an_earlier_turn_is_drawn_where_it_happened() -> None:
    # The core accepts `compact` with a turn below the highest seen; its events carry it.
    driver = Driver()
    driver.inject("a")
    driver.ok("end_turn", turn=1)
    driver.inject("b", ttl_turns=3)
    driver.ok("compact", turn=0)
    assert [e.turn for e in driver.log] == [0, 1, 1, 0, 0, 0]
    drawn = chart(driver.log)
    assert drawn.turns == (0, 1)
    spans = [(b.reminder_id, b.first_turn, b.last_turn) for b in drawn.bars]
    assert spans == [("r-00001", 0, 1), ("r-00003", 1, 1)]
    assert all("(#4, recorded as turn 0)" in b.title for b in drawn.bars[:1])
    assert [(m.kind, m.turn) for m in drawn.session_markers] == [("compacted", 1)]


def with_provider_evaluations(result: ReplayResult) -> list[ev.Event]:
    """A golden log plus three `provider_evaluated` events (none is produced yet)."""
    events = list(result.events)
    last = events[-1]
    for n, (turn, fired) in enumerate([(1, True), (2, False), (2, True)], start=1):
        payload = {
            "provider_id": f"p-{n}",
            "event": "tool_result",
            "runtime_event_id": f"rt-{n}",
            "fired": fired,
            "reason": "matched" if fired else "below threshold",
            "reminder_id": None,
            "error": None,
        }
        # Only the fields the payload model has today (SPEC §3.5 lists a few more).
        known = {k: v for k, v in payload.items() if k in ev.ProviderEvaluated.model_fields}
        wire = {**last.to_wire(), "kind": "provider_evaluated", "payload": known}
        events.append(
            ev.Event.model_validate({**wire, "session_seq": last.session_seq + n, "turn": turn})
        )
    return events


def test_each_provider_evaluation_gets_a_marker_in_its_turns_column() -> None:
    drawn = chart(with_provider_evaluations(replayed(GOLDEN_DIR / "basic_turns.events.jsonl")))
    assert [(m.turn, m.fired) for m in drawn.providers] == [(1, True), (2, False), (2, True)]
    assert drawn.turns == (0, 1, 2)
    root = svg_tree(drawn)
    markers = [g for g in groups(root, "marker") if g.get("data-kind") == "provider_evaluated"]
    assert [g.get("data-turn") for g in markers] == ["1", "2", "2"]
    lay = layout(drawn)
    provider_lane = lay.row_y(len(drawn.rows) + 1)
    xs = []
    for g in markers:
        shape = g.find("svg:rect", NS)
        assert shape is not None
        x, y = float(shape.get("x", "0")) + 4.5, float(shape.get("y", "0")) + 4.5
        col = lay.col_x(int(g.get("data-turn", "0")))
        assert col < x < col + lay.col_w
        assert provider_lane < y < provider_lane + ROW_H
        assert "provider_evaluated" in title_of(g)
        xs.append(x)
    assert xs[1] < xs[2]  # two evaluations in one turn sit side by side
    fills = [g.find("svg:rect", NS).get("fill") for g in markers]  # type: ignore[union-attr]
    assert fills[0] == fills[2] != fills[1]  # fired filled, quiet hollow


# ---------------------------------------------------------------------------------------------
# The SVG, read back as XML.


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_the_svg_draws_each_bar_in_its_row_and_columns(path: Path) -> None:
    result = replayed(path)
    drawn = chart(result.events)
    root = svg_tree(drawn, session_of(result))
    lay = layout(drawn)
    cols = {int(g.get("data-turn", "")): g for g in groups(root, "col")}
    assert sorted(cols) == list(drawn.turns)
    bar_groups = groups(root, "bar")
    assert len(bar_groups) == len(drawn.bars)
    row_groups = {r.get("data-reminder"): r for r in groups(root, "row")}
    for g, bar in zip(bar_groups, drawn.bars, strict=True):
        assert g.get("data-reminder") == bar.reminder_id
        assert g.get("data-first-turn") == str(bar.first_turn)
        assert g.get("data-last-turn") == str(bar.last_turn)
        assert g.get("data-authority") == bar.authority
        rect = g.find("svg:rect", NS)
        assert rect is not None
        x, width = int(rect.get("x", "")), int(rect.get("width", ""))
        y, height = int(rect.get("y", "")), int(rect.get("height", ""))
        assert lay.col_x(bar.first_turn) <= x < lay.col_x(bar.first_turn) + lay.col_w
        right = x + width
        assert lay.col_x(bar.last_turn) < right <= lay.col_x(bar.last_turn) + lay.col_w
        row_top = lay.row_y(drawn.rows.index(next(r for r in drawn.rows if bar in r.bars)) + 1)
        assert row_top <= y and y + height <= row_top + ROW_H
        fill, stroke = AUTHORITY_COLOURS[bar.authority]
        assert rect.get("stroke") == stroke
        assert rect.get("fill") == ("#ffffff" if not bar.injected else fill)
        assert bar.reminder_id in title_of(g) and ("injected" in title_of(g) or not bar.injected)
        assert (g.find("svg:path[@class='still-live']", NS) is not None) == (bar.ended_by is None)
        assert g in list(row_groups[bar.reminder_id])


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_every_marker_has_a_title_naming_its_reminder_and_kind_and_no_body(path: Path) -> None:
    result = replayed(path)
    drawn = chart(result.events)
    root = svg_tree(drawn, session_of(result))
    markers = groups(root, "marker")
    expected = sum(len(r.markers) for r in drawn.rows) + len(drawn.session_markers)
    assert len(markers) == expected + len(drawn.providers)
    assert {g.get("data-kind") for g in markers} <= set(MARKER_KINDS)
    bodies = {
        " ".join(e.payload.reminder.body.split())
        for e in result.events
        if isinstance(e.payload, ev.Injected | ev.Queued)
    }
    titles = [t.text or "" for t in root.iter(f"{{{NS['svg']}}}title")]
    for text in titles:
        assert not any(body in text for body in bodies), text
    for g in markers:
        title = title_of(g)
        assert str(g.get("data-kind")) in title
        if g.get("data-reminder"):
            assert title.startswith(f"{g.get('data-reminder')}: ")
            assert f"at turn {g.get('data-turn')} (#{g.get('data-seq')})" in title
    # Every link stays inside the page; nothing is fetched.
    for element in root.iter():
        assert not element.tag.endswith("script")
        href = element.get("href")
        assert href is None or href.startswith("#envelope-")
        assert not element.tag.endswith(("image", "foreignObject", "style"))


def test_the_legend_names_every_authority_and_marker_kind() -> None:
    drawn = chart(replayed(GOLDEN_DIR / "basic_turns.events.jsonl").events)
    svg = chart_svg(drawn, "golden-1")
    root = ET.fromstring(svg)
    (legend,) = groups(root, "legend")
    words = " ".join(t.text or "" for t in legend.iter(f"{{{NS['svg']}}}text"))
    for authority in ("contract", "corrective", "advisory"):
        assert authority in words
    for phrase in ("queued", "fired", "delivered", "deduped", "compaction", "revoked"):
        assert phrase in words
    for phrase in ("inherited", "dropped", "handed off", "provider evaluated", "still live"):
        assert phrase in words


def test_a_row_label_is_the_tags_or_key_then_the_first_words_of_the_body() -> None:
    body = "one  two three\nfour five six seven eight nine ten"
    assert row_label(["ci", "build"], "key", body) == (
        "ci, build · one two three four five six seven eight…"
    )
    assert (
        row_label([], "token_pressure", "  Context at 95 %. ")
        == "token_pressure · Context at 95 %."
    )
    assert row_label([], None, "Never push to main.") == "Never push to main."
    assert len(row_label([], None, body).split()) == LABEL_WORDS


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_each_row_is_labelled_by_what_its_reminder_says_with_its_id_on_hover(path: Path) -> None:
    result = replayed(path)
    drawn = chart(result.events)
    for row in drawn.rows:
        first = next(
            e.payload
            for e in result.events
            if (isinstance(e.payload, ev.Injected) and e.payload.reminder_id == row.reminder_id)
            or (isinstance(e.payload, ev.Queued) and e.payload.reminder.id == row.reminder_id)
        )
        spec = first.reminder
        words = spec.body.split()
        assert row.label.endswith(" ".join(words[:LABEL_WORDS]) + ("…" if len(words) > 8 else ""))
        key = ", ".join(spec.tags) or spec.dedupe_key
        assert row.label.startswith(f"{key} · ") if key else row.label.startswith(words[0])
    root = svg_tree(drawn, session_of(result))
    labels = [t for t in root.iter(f"{{{NS['svg']}}}text") if t.get("class") == "row-label"]
    assert len(labels) == len(drawn.rows)
    for text, row in zip(labels, drawn.rows, strict=True):
        shown = "".join(text.itertext()).removeprefix(title_of(text))
        assert title_of(text) == row.reminder_id  # the id on hover, not as the label
        cut = row.label if len(row.label) <= LABEL_CHARS else row.label[: LABEL_CHARS - 1]
        assert shown.rstrip("…") == cut.rstrip()


def _long_session(turns: int) -> Chart:
    driver = Driver("long")
    for turn in range(turns):
        driver.inject(f"Turn {turn}: the build failed again, read the log", ttl_turns=2)
        driver.ok("render", turn=turn)
        driver.ok("end_turn", turn=turn)
    return chart(replay(rows_of(list(driver.log))).events)


@pytest.mark.parametrize("turns", [1, 4, 12, 40, 80])
def test_the_chart_fills_the_page_width_and_scrolls_only_past_it(turns: int) -> None:
    drawn = _long_session(turns)
    lay = layout(drawn)
    root = svg_tree(drawn)
    assert root.get("width") == "100%" and root.get("height") is None
    view_w = int((root.get("viewBox") or "").split()[2])
    assert view_w == lay.width
    grid_right = lay.grid_x + lay.grid_w
    if lay.col_w > MIN_COL_W:
        # The turns share all the width the labels leave: nothing is left over but rounding.
        assert lay.width == PAGE_W and PAGE_W - grid_right - 30 < len(drawn.turns)
        assert root.get("style") is None
        assert lay.grid_w > PAGE_W * 2 / 3  # the turns, not the labels, take the page
    else:
        assert lay.width == grid_right + 23 > PAGE_W
        assert root.get("style") == f"min-width:{lay.width}px"


def test_an_empty_log_draws_an_empty_chart() -> None:
    drawn = chart([])
    assert drawn == Chart((), (), (), (), ())
    assert groups(svg_tree(drawn), "bar") == []


# ---------------------------------------------------------------------------------------------
# The page: determinism and the envelopes one click away.


class _Envelopes(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: dict[str, str] = {}
        self._current: str | None = None
        self._in_pre = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "details" and values.get("class") == "envelope-text":
            self._current = values.get("data-seq")
        elif tag == "pre" and self._current is not None:
            self._in_pre = True
            self.found[self._current] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "pre":
            self._in_pre = False
        elif tag == "details":
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._in_pre and self._current is not None:
            self.found[self._current] += data


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_the_page_is_the_same_bytes_twice_and_holds_each_envelope_exactly(path: Path) -> None:
    first, second = replayed(path), replayed(path)
    session = session_of(first)
    page = html_report(session, first)
    assert page == html_report(session, second)
    assert chart_svg(chart(first.events), session) == chart_svg(chart(second.events), session)
    assert chart_svg(chart(first.events), session, inline=True) in page
    parser = _Envelopes()
    parser.feed(page)
    delivered = {
        str(e.session_seq): e.payload.text
        for e in first.events
        if isinstance(e.payload, ev.Delivered)
    }
    assert parser.found == delivered
    for seq, text in delivered.items():
        assert f"<pre>{html.escape(text)}</pre></details>" in page
        assert f'href="#envelope-{seq}"' in page
    assert page.count("<svg ") == 1 and "<script" not in page
    assert "http://" not in page and "https://" not in page


@settings(SEQUENCE_SETTINGS, max_examples=60)
@given(script=scripts())
def test_any_decided_log_charts_consistently_with_its_replay(script: Script) -> None:
    show(script)
    driver, _ = run(script)
    result = replay(rows_of(list(driver.log)))
    drawn = chart(result.events)
    state = result.state
    still = [bar.reminder_id for bar in drawn.bars if bar.ended_by is None]
    assert sorted(still) == sorted(
        [row.spec.id or "" for row in state.pending] + [r.reminder.id or "" for r in state.queued]
    )
    for bar in drawn.bars:
        assert drawn.turns[0] <= bar.first_turn <= bar.last_turn <= drawn.turns[-1]
    svg = chart_svg(drawn, "s")
    assert len(groups(ET.fromstring(svg), "bar")) == len(drawn.bars)
    assert svg == chart_svg(chart(result.events), "s")
