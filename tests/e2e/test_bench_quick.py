"""`python -m bench --quick` as CI runs it: a real process that runs every scenario at tiny
sizes. It says nothing about speed; it checks that the suite still runs and reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.report import FIGURES, SCENARIOS

ROOT = Path(__file__).resolve().parents[2]


def _module(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`python -m ARGS` from the repository's root, which must succeed."""
    result = subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_the_quick_bench_runs_every_scenario_and_reports_numbers(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    result = _module("bench", "--quick", "--output", str(output), timeout_s=600)
    printed = json.loads(result.stdout)
    assert json.loads(output.read_text(encoding="utf-8")) == printed
    assert set(printed["scenarios"]) == set(SCENARIOS)
    for name, measured in printed["scenarios"].items():
        numbers = [value for value in measured.values() if isinstance(value, int | float)]
        assert numbers, f"{name} reported no numbers"
    assert set(printed["figures"]) == {figure.key for figure in FIGURES}
    for key, figure in printed["figures"].items():
        assert isinstance(figure["value"], int | float), key
        assert figure["target"], key
        assert isinstance(figure["met"], bool), key
        if figure["baseline"] is not None:
            assert isinstance(figure["ratio"], int | float), key
    scenarios = printed["scenarios"]
    assert scenarios["write_gateway"]["null_gateway_per_s"] > 0
    assert scenarios["write_gateway"]["null_gateway_failed"] == 0
    gateway = scenarios["write_gateway"]["gateway_stages_us_per_command"]
    assert gateway["total"] > 0 and gateway["decide"] > 0 and gateway["nats_read"] > 0, gateway
    sequential = scenarios["sequential_latency"]
    assert sequential["echo_round_trip_p50_ms"] > 0, sequential
    assert sequential["gateway_stages_us_per_command"]["decide"] > 0, sequential
    assert scenarios["rebuild"]["rebuild_peak_rss_mib"] > 0
    visible = scenarios["inject_visible"]
    # Split at the inject's reply: the two parts make up the whole (p50s of parts need not
    # add up exactly), and the synced commit is measured beside it.
    assert 0 < visible["inject_reply_p50_ms"] < visible["visible_p50_ms"], visible
    assert 0 < visible["reply_to_visible_p50_ms"] < visible["visible_p50_ms"], visible
    assert visible["raw_atomic_batch_p50_ms"] > 0, visible
    assert printed["figures"]["inject_visible_p99"]["baseline"] > 0
    for name in ("projector_10k", "projector_100k"):
        stages = scenarios[name]["projector_stages_us_per_event"]
        assert stages["total"] > 0 and stages["validate_chain_fold"] > 0, (name, stages)
    # The A/B table of a run against itself: every figure, every stage profile, no change.
    compared = _module("bench", "--compare", str(output), str(output), timeout_s=60).stdout
    for figure in printed["figures"].values():
        assert f"| {figure['what']} |" in compared
    assert "projector_10k `projector_stages_us_per_event`" in compared
    assert "write_gateway `gateway_stages_us_per_command`" in compared
    assert "sequential_latency `gateway_stages_us_per_command`" in compared
    assert "| validate_chain_fold |" in compared
    assert "+0 %" in compared


def test_the_markdown_table_has_a_row_per_figure(tmp_path: Path) -> None:
    figures = {
        figure.key: {
            "what": figure.what,
            "unit": figure.unit,
            "value": 1.0,
            "baseline": 2.0 if figure.baseline else None,
            "baseline_what": figure.baseline_what or None,
            "ratio": 0.5 if figure.baseline else None,
            "target": figure.target_text(),
            "met": False,
        }
        for figure in FIGURES
    }
    results = tmp_path / "bench.json"
    results.write_text(json.dumps({"figures": figures, "run": {}}), encoding="utf-8")
    table = _module("bench", "--markdown", str(results), timeout_s=60).stdout
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(FIGURES)


def test_the_sequential_trace_accounts_for_every_segment_of_a_command() -> None:
    from bench.sequential_trace import SEGMENTS

    result = _module("bench.sequential_trace", "--commands", "5", timeout_s=300)
    traced = json.loads(result.stdout)
    segments = traced["segments_p50_us"]
    assert list(segments) == [name for name, _, _ in SEGMENTS]
    assert all(value >= 0 for value in segments.values()), segments
    assert segments["decide"] > 0 and segments["atomic_batch"] > 0, segments
    # The segments follow one another: each command's sum is its whole latency.
    assert traced["total_p50_us"] >= segments["atomic_batch"], traced
    assert traced["raw_atomic_batch_p50_us"] > 0 and traced["echo_round_trip_p50_us"] > 0


def test_old_sessions_report_the_providers_cpu_on_sessions_holding_remembered_replies(
    tmp_path: Path,
) -> None:
    output = tmp_path / "old.json"
    # Enough events that the providers process spends several of the kernel's 10 ms CPU ticks
    # (`bench.common.cpu_seconds`): with 12 a fast host measured it at 0.
    args = ["--sessions", "3", "--prefill", "10", "--events", "120", "--output", str(output)]
    result = _module("bench.old_sessions", *args, timeout_s=300)
    measured = json.loads(result.stdout)
    assert json.loads(output.read_text(encoding="utf-8")) == measured
    assert measured["cpu_ms_per_runtime_event"]["providers"] > 0, measured
    assert measured["runtime_events_per_s"] > 0, measured
    # Ten remembered replies and more: larger than a fresh session's value.
    assert measured["value_bytes"] > 2000, measured
