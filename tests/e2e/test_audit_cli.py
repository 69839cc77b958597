"""`reminders replay | export | rebuild | verify-projection` as an auditor runs them."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import orjson
import pytest
from nats.aio.client import Client

from cli.demo import DEMO_SCRIPT
from client.sdk import ReminderClient
from replay.chart import chart
from replay.engine import replay
from replay.source import ReadStats, rows_from_file, rows_from_nats
from replay.svg import AUTHORITY_COLOURS
from services.adapters.settings import Settings
from tests.golden.regen import GOLDEN_DIR
from tests.integration.read_side import canonical, projected, wait_projected_equal
from tests.processes import ServiceRunner

ROOT = Path(__file__).resolve().parents[2]


def reminders(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        capture_output=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


async def drive_demo(nc: Client) -> None:
    client = ReminderClient(nc)
    for op, command in DEMO_SCRIPT:
        assert (await client.request(op, command))["ok"]


@pytest.fixture
async def demo_log(nc: Client, provisioned: Settings, services: ServiceRunner) -> Settings:
    services.start("gateway")
    await drive_demo(nc)
    return provisioned


def test_a_golden_log_replays_from_a_file_to_its_golden_bytes() -> None:
    for path in sorted(GOLDEN_DIR.glob("*.events.jsonl")):
        session_id = orjson.loads(path.read_bytes().splitlines()[0])["session_id"]
        result = reminders("replay", session_id, "--from", str(path), "--verify")
        assert result.returncode == 0, result.stderr
        state_file = path.name.replace(".events.jsonl", ".state.json")
        assert result.stdout == (GOLDEN_DIR / state_file).read_bytes()
        assert b"verify: ok" in result.stderr


async def test_two_processes_replaying_the_same_log_print_the_same_bytes(
    nc: Client, demo_log: Settings, services: ServiceRunner, tmp_path: Path
) -> None:
    services.start("projector")
    for output_format in ("json", "text", "html"):
        outputs = [
            reminders(
                "replay", "demo-session", "--nats", demo_log.nats_url, "--format", output_format
            )
            for _ in range(2)
        ]
        assert all(result.returncode == 0 for result in outputs), outputs[0].stderr
        assert outputs[0].stdout == outputs[1].stdout
        assert outputs[0].stdout
    exported = tmp_path / "demo.jsonl"
    assert (
        reminders(
            "export", "demo-session", "--nats", demo_log.nats_url, "--output", str(exported)
        ).returncode
        == 0
    )
    from_file = reminders("replay", "demo-session", "--from", str(exported), "--verify")
    from_nats = reminders("replay", "demo-session", "--nats", demo_log.nats_url)
    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stdout == from_nats.stdout
    # The live projection is byte for byte what the replay prints.
    await wait_projected_equal(nc, demo_log, ["demo-session"])
    assert (canonical(await projected(nc, demo_log, "demo-session")) + "\n").encode() == (
        from_nats.stdout
    )


async def test_tampering_with_an_export_makes_verify_fail_naming_the_event(
    demo_log: Settings, tmp_path: Path
) -> None:
    exported = tmp_path / "demo.jsonl"
    assert (
        reminders(
            "export", "demo-session", "--nats", demo_log.nats_url, "-o", str(exported)
        ).returncode
        == 0
    )
    lines = exported.read_bytes().splitlines()
    index = next(i for i, line in enumerate(lines) if b'"kind":"delivered"' in line)
    row = orjson.loads(lines[index])
    row["payload"]["text"] = row["payload"]["text"].replace("/srv/app", "/")
    cases = {
        "edited": [*lines[:index], orjson.dumps(row), *lines[index + 1 :]],
        "deleted": lines[:3] + lines[4:],
        "reordered": [lines[0], lines[2], lines[1], *lines[3:]],
    }
    for name, variant in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"\n".join(variant) + b"\n")
        result = reminders("replay", "demo-session", "--from", str(path), "--verify")
        assert result.returncode == 1, name
        message = result.stderr.decode()
        assert "verify failed at event session_seq" in message, (name, message)
        assert "Traceback" not in message
    edited = reminders(
        "replay", "demo-session", "--from", str(tmp_path / "edited.jsonl"), "--verify"
    )
    assert f"event session_seq {index + 1} (delivered".encode() in edited.stderr


async def test_replaying_one_session_reads_only_that_sessions_messages(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    # 150 commands at once: neither the rate limit nor the in-flight bound is under test.
    services.start(
        "gateway",
        extra_env={"REMINDERS_RATE_LIMIT": "100000", "REMINDERS_MAX_IN_FLIGHT": "1000"},
    )
    client = ReminderClient(nc)
    await asyncio.gather(*(client.inject(f"noise-{n}", "x") for n in range(150)))
    await client.inject("needle", "a")
    await client.inject("needle", "b", dedupe_key="k")
    await asyncio.gather(*(client.inject(f"noise-{n}", "y") for n in range(150)))
    stats = ReadStats()
    rows = await rows_from_nats(nc, provisioned.stream, "needle", stats)
    assert len(rows) == 2
    # The server matched and sent exactly the session's two messages.
    assert stats.matching_at_start == 2
    assert stats.server_sent == 2
    assert stats.delivered == 2
    info = await nc.jetstream().stream_info(provisioned.stream)
    assert info.state.messages == 302


async def test_rebuild_on_a_live_system_ends_equal_to_verify_projection(
    nc: Client, provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway", extra_env={"REMINDERS_RATE_LIMIT": "100000"})
    services.start("projector")
    client = ReminderClient(nc)
    sessions = [f"live-{n}" for n in range(15)]

    async def traffic(turns: range) -> None:
        for turn in turns:
            await asyncio.gather(*(client.inject(s, f"t{turn}", ttl_turns=2) for s in sessions))
            await asyncio.gather(*(client.render(s, turn) for s in sessions))
            await asyncio.gather(*(client.end_turn(s, turn) for s in sessions))

    await traffic(range(3))
    background = asyncio.ensure_future(traffic(range(3, 8)))
    rebuilt = await asyncio.to_thread(reminders, "rebuild", "--nats", provisioned.nats_url)
    await background
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert b"rebuilt" in rebuilt.stderr
    await wait_projected_equal(nc, provisioned, sessions)
    verified = reminders("verify-projection", "--all", "--nats", provisioned.nats_url)
    assert verified.returncode == 0, verified.stderr
    assert b"ok: 15 session(s) equal to a replay" in verified.stderr


async def test_verify_projection_fails_on_a_projection_that_differs(
    nc: Client, demo_log: Settings, services: ServiceRunner
) -> None:
    services.start("projector")
    await wait_projected_equal(nc, demo_log, ["demo-session"])
    services.stop_all()
    kv = await nc.jetstream().key_value(demo_log.kv_bucket)
    entry = await kv.get("demo-session")
    state = orjson.loads(entry.value or b"{}")
    state["turn"] = 99
    await kv.put("demo-session", orjson.dumps(state))
    result = reminders("verify-projection", "demo-session", "--nats", demo_log.nats_url)
    assert result.returncode == 1
    assert b"MISMATCH demo-session" in result.stderr
    assert reminders("rebuild", "--nats", demo_log.nats_url).returncode == 0
    assert reminders("verify-projection", "--nats", demo_log.nats_url).returncode == 0


def test_verify_projection_of_an_unknown_session_is_an_error(provisioned: Settings) -> None:
    result = reminders("verify-projection", "no-such-session", "--nats", provisioned.nats_url)
    assert result.returncode == 1
    text = result.stderr.decode()
    assert "unknown session 'no-such-session'" in " ".join(text.split())
    assert len(text.strip().splitlines()) == 1
    assert b"ok" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("replay", "ghost", "--from", "tests/golden/basic_turns.events.jsonl"),
            "unknown session 'ghost'",
        ),
        (
            ("replay", "s", "--nats", "nats://127.0.0.1:9"),
            "cannot reach NATS at nats://127.0.0.1:9",
        ),
        (("replay", "s", "--from", "README.md"), "not a valid export line"),
        (("replay", "s", "--from", "missing.jsonl"), "no such file"),
        (("replay", "s"), "give exactly one source"),
    ],
)
def test_audit_errors_are_one_readable_line(args: tuple[str, ...], message: str) -> None:
    result = reminders(*args, timeout=60)
    assert result.returncode == 1
    text = result.stderr.decode()
    assert message in " ".join(text.split())
    assert "Traceback" not in text
    assert len(text.strip().splitlines()) == 1


def test_cuts_before_the_first_event_and_past_the_last_are_explicit() -> None:
    golden = str(GOLDEN_DIR / "basic_turns.events.jsonl")
    full = reminders("replay", "golden-1", "--from", golden)
    for cut in (("--until-seq", "0"), ("--until-time", "2000-01-01T00:00:00Z")):
        before = reminders("replay", "golden-1", "--from", golden, *cut)
        assert before.returncode == 0, before.stderr
        state = orjson.loads(before.stdout)
        assert state["session_id"] == "golden-1"  # the empty state of this session
        assert state["session_seq"] == 0 and state["pending"] == []
        assert before.stderr == b""
    past = reminders("replay", "golden-1", "--from", golden, "--until-seq", "999")
    assert past.returncode == 0
    assert past.stdout == full.stdout  # the whole state
    note = past.stderr.decode().strip().splitlines()
    assert len(note) == 1 and note[0].startswith("note: --until-seq 999 is past the last event")


def test_a_failed_verify_prints_no_state(tmp_path: Path) -> None:
    lines = GOLDEN_DIR.joinpath("basic_turns.events.jsonl").read_bytes().splitlines()
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(b"\n".join([lines[0], lines[2], lines[1], *lines[3:]]) + b"\n")
    for output_format in ("json", "text", "html"):
        result = reminders(
            "replay", "golden-1", "--from", str(tampered), "--verify", "--format", output_format
        )
        assert result.returncode == 1
        assert result.stdout == b""
        assert len(result.stderr.decode().strip().splitlines()) == 1
        assert b"verify failed at event session_seq" in result.stderr
    written = tmp_path / "state.json"
    result = reminders(
        "replay", "golden-1", "--from", str(tampered), "--verify", "-o", str(written)
    )
    assert result.returncode == 1 and not written.exists()


def test_an_event_of_an_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    line = orjson.loads(
        GOLDEN_DIR.joinpath("basic_turns.events.jsonl").read_bytes().splitlines()[0]
    )
    line["schema"] = "reminder-ledger.event/v9"
    path = tmp_path / "future.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    result = reminders("replay", "golden-1", "--from", str(path))
    assert result.returncode == 1
    assert b"unknown event schema version 'reminder-ledger.event/v9'" in result.stderr


needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium (.ci/run installs it)"
)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Debian chromium, offline and with a throwaway profile."""
    return subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
        ],
        capture_output=True,
        timeout=120,
        check=False,
        text=True,
    )


@needs_chromium
def test_the_html_audit_opens_in_a_browser_with_the_turns_and_directives(tmp_path: Path) -> None:
    page = tmp_path / "audit.html"
    result = reminders(
        "replay",
        "golden-1",
        "--from",
        str(GOLDEN_DIR / "basic_turns.events.jsonl"),
        "--format",
        "html",
        "--output",
        str(page),
    )
    assert result.returncode == 0, result.stderr
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert '<div class="turn" data-turn="0">' in html
    assert '<div class="turn" data-turn="1">' in html
    assert 'data-directives="r-00003 r-00001 r-00005"' in html
    # The envelope text (itself escaped per §5.1) survives HTML escaping exactly.
    assert "summarise &amp;lt;/directive&amp;gt; &amp;amp; stop." in html
    assert 'data-reminder="r-00001"' in html and "replaced by r-00011" in html
    assert "http://" not in page.read_text() and "https://" not in page.read_text()


#: Test-only probe, appended to a *copy* of the page (the audit page itself has no script):
#: it writes the laid-out boxes of the chart's columns, bars and markers into the DOM, where
#: `--dump-dom` reads them back.
MEASURE = """<script>
const box = (el) => { const r = el.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
const out = {
  svg: box(document.querySelector("svg.reminder-chart")), page: document.body.clientWidth,
  labels: [...document.querySelectorAll("svg text.row-label")].map((t) =>
    ({id: t.querySelector("title").textContent, shown: t.textContent, ...box(t)})),
  cols: [...document.querySelectorAll("svg g.col")].map((g) =>
    ({turn: g.dataset.turn, ...box(g.querySelector("rect"))})),
  rows: [...document.querySelectorAll("svg g.row")].map((g) => ({id: g.dataset.reminder})),
  bars: [...document.querySelectorAll("svg g.bar")].map((g) => ({id: g.dataset.reminder,
    first: g.dataset.firstTurn, last: g.dataset.lastTurn, ...box(g.querySelector("rect"))})),
  markers: [...document.querySelectorAll("svg g.marker")].map((g) => ({kind: g.dataset.kind,
    id: g.dataset.reminder || null, turn: g.dataset.turn, ...box(g)})),
};
const pre = document.createElement("pre"); pre.id = "measured";
pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
</script>"""


def png_pixels(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, unfiltered pixel bytes) of an 8-bit RGB(A) PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    out, previous = bytearray(), bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = previous[i]
            c = previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        out += line
        previous = line
    return width, height, bpp, bytes(out)


@needs_chromium
def test_the_html_chart_draws_each_bar_where_the_replay_puts_it(tmp_path: Path) -> None:
    golden = GOLDEN_DIR / "compaction_and_handoff.events.jsonl"
    page = tmp_path / "audit.html"
    result = reminders(
        "replay", "golden-3", "--from", str(golden), "--format", "html", "-o", str(page)
    )
    assert result.returncode == 0, result.stderr
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text
    expected = chart(replay(rows_from_file(golden)).events)

    # The page as the browser parsed it still holds one bar per reminder.
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('<g class="bar"') == len(expected.bars) == 4
    assert dom.stdout.count('<details class="envelope-text"') == len(expected.envelopes)

    # Where the browser laid them out: each bar spans exactly its columns, in its row.
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    measured = chromium(tmp_path, "--dump-dom", probe.as_uri())
    assert measured.returncode == 0, measured.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', measured.stdout, re.S)
    assert found, measured.stdout[-2000:]
    boxes = json.loads(html.unescape(found.group(1)))
    cols = {int(c["turn"]): c for c in boxes["cols"]}
    assert sorted(cols) == list(expected.turns) == [0, 1, 2, 3]
    assert all(cols[t]["right"] <= cols[t + 1]["left"] + 0.5 for t in (0, 1, 2))
    assert [r["id"] for r in boxes["rows"]] == [row.reminder_id for row in expected.rows]
    assert len(boxes["bars"]) == len(expected.bars)
    for drawn, bar in zip(boxes["bars"], expected.bars, strict=True):
        assert (drawn["id"], drawn["first"], drawn["last"]) == (
            bar.reminder_id,
            str(bar.first_turn),
            str(bar.last_turn),
        )
        first, last = cols[bar.first_turn], cols[bar.last_turn]
        assert first["left"] <= drawn["left"] <= first["left"] + 4
        assert last["right"] - 4 <= drawn["right"] <= last["right"]
        assert drawn["bottom"] - drawn["top"] > 8
    tops = [b["top"] for b in boxes["bars"]]
    assert tops == sorted(tops) and len(set(tops)) == len(tops)  # one row each, in order
    spans = {b["id"]: b["right"] - b["left"] for b in boxes["bars"]}
    assert spans["rule-1"] > 3 * spans["trunc-1"]  # live 0→3 against expired in turn 0
    for marker in boxes["markers"]:
        middle = (marker["left"] + marker["right"]) / 2
        col = cols[int(marker["turn"])]
        assert col["left"] < middle < col["right"], marker
        if marker["id"] is not None:
            bar = next(b for b in boxes["bars"] if b["id"] == marker["id"])
            assert bar["top"] <= (marker["top"] + marker["bottom"]) / 2 <= bar["bottom"]
    kinds = {(m["id"], m["kind"]) for m in boxes["markers"]}
    assert {("rule-1", "handed_off"), ("tp-1", "compacted"), (None, "envelope")} <= kinds

    # And it really painted: a screenshot that is not blank and shows the contract bars.
    shot = tmp_path / "chart.png"
    taken = chromium(tmp_path, "--window-size=900,700", f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    width, height, bpp, pixels = png_pixels(shot.read_bytes())
    assert (width, height) == (900, 700)
    grey = pixels[::bpp]
    mean = sum(grey) / len(grey)
    variance = sum((v - mean) ** 2 for v in grey[:: max(1, len(grey) // 50000)]) / min(
        len(grey), 50000
    )
    assert variance > 100, variance  # not a blank page
    fill = bytes.fromhex(AUTHORITY_COLOURS["contract"][0].removeprefix("#"))
    painted = sum(
        1
        for i in range(0, len(pixels), bpp)
        if all(abs(pixels[i + k] - fill[k]) <= 6 for k in range(3))
    )
    assert painted > 2000, painted  # the four contract bars, 14 px high, hundreds wide


@needs_chromium
def test_the_html_chart_uses_the_page_width_and_names_each_row_by_what_it_says(
    tmp_path: Path,
) -> None:
    golden = GOLDEN_DIR / "compaction_and_handoff.events.jsonl"
    page = tmp_path / "audit.html"
    result = reminders(
        "replay", "golden-3", "--from", str(golden), "--format", "html", "-o", str(page)
    )
    assert result.returncode == 0, result.stderr
    expected = chart(replay(rows_from_file(golden)).events)
    probe = tmp_path / "probe.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8"
    )
    for window in (1400, 1900):
        measured = chromium(tmp_path, f"--window-size={window},900", "--dump-dom", probe.as_uri())
        assert measured.returncode == 0, measured.stderr[-2000:]
        found = re.search(r'<pre id="measured">(.*?)</pre>', measured.stdout, re.S)
        assert found, measured.stdout[-2000:]
        boxes = json.loads(html.unescape(found.group(1)))
        svg_w = boxes["svg"]["right"] - boxes["svg"]["left"]
        # The chart spans the page's content width, and its turns most of the chart.
        assert svg_w >= 0.98 * boxes["page"], (window, svg_w, boxes["page"])
        turns_w = boxes["cols"][-1]["right"] - boxes["cols"][0]["left"]
        assert turns_w > 0.6 * svg_w, (window, turns_w, svg_w)
        # Each row is named by what its reminder says; its id is only the hover title.
        assert [
            (label["id"], label["shown"].removeprefix(label["id"])) for label in boxes["labels"]
        ] == [(row.reminder_id, row.label) for row in expected.rows]
        assert "Never push to main." in [row.label for row in expected.rows]
        for label in boxes["labels"]:
            assert label["right"] <= boxes["cols"][0]["left"]  # never under the bars
