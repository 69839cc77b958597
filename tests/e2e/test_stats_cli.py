"""`reminders stats` as a user runs it: over an export, in every format, the HTML page opened
in headless chromium, and bad input as one line with exit 1."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_audit_cli import chromium, needs_chromium, reminders
from tests.golden.regen import GOLDEN_DIR

LOG = str(GOLDEN_DIR / "cost_and_effect.events.jsonl")


def test_json_over_one_session_is_the_spec_shape() -> None:
    result = reminders("stats", "golden-4", "--from", LOG, "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["sessions"] == 1
    assert report["totals"]["acknowledged"] == {"acted": 2, "ignored": 1, "dismissed": 1}


def test_the_table_over_every_session_of_an_export(tmp_path: Path) -> None:
    export = tmp_path / "all.jsonl"
    export.write_bytes(b"".join(p.read_bytes() for p in sorted(GOLDEN_DIR.glob("*.events.jsonl"))))
    result = reminders("stats", "--all", "--from", str(export))
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    sessions = len(list(GOLDEN_DIR.glob("*.events.jsonl")))  # one session per golden log
    assert f"over {sessions} session(s)" in text and "hook · — · tests" in text
    assert "all reminders" in text


def test_bad_input_is_one_line_and_exit_1() -> None:
    for args in (
        ("stats", "--from", LOG),  # neither SESSION nor --all
        ("stats", "golden-4", "--all", "--from", LOG),
        ("stats", "golden-4", "--from", LOG, "--since", "yesterday"),
        ("stats", "nobody", "--from", LOG),
        ("stats", "golden-4", "--from", "/no/such/file.jsonl"),
    ):
        result = reminders(*args)
        assert result.returncode == 1, (args, result.stdout)
        lines = result.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), (args, lines)


@needs_chromium
def test_the_html_report_opens_in_a_browser_with_its_chart(tmp_path: Path) -> None:
    page = tmp_path / "effect.html"
    result = reminders("stats", "golden-4", "--from", LOG, "--format", "html", "-o", str(page))
    assert result.returncode == 0, result.stderr
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('<g class="effect-row"') == 4
    assert 'data-row="in_pipeline · — · deploy"' in dom.stdout
    assert 'data-outcome="dismissed"' in dom.stdout
    assert '<tr class="totals">' in dom.stdout
    shot = tmp_path / "effect.png"
    taken = chromium(tmp_path, "--window-size=1200,500", f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0 and shot.stat().st_size > 5000, taken.stderr[-2000:]
