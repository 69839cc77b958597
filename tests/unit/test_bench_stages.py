"""The stage profile's arithmetic and the A/B table (`bench.stages`)."""

from __future__ import annotations

import gc
import json
from pathlib import Path

from bench.stages import GATEWAY_STAGES, PROJECTOR_STAGES, compare, snapshot, stage_profile
from services.adapters.stages import StageProfile


def test_stages_are_per_unit_and_the_remainders_are_what_no_bracket_covered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stages.json"
    seconds = {"receive": 1.0, "parse": 0.5, "validate_chain_fold": 2.0, "encode": 0.5}
    seconds |= {"ack": 0.25, "batch": 4.0}
    path.write_text(
        json.dumps({"seconds": seconds, "units": {"events": 1000}, "process_cpu_s": 6.0})
    )
    profile = stage_profile(path, "events", PROJECTOR_STAGES)
    assert profile["receive"] == 1000.0
    assert profile["kv_and_scheduling"] == 750.0  # batch less the four stages inside it
    assert profile["other"] == 1000.0  # process less receive and batch
    assert profile["total"] == 6000.0
    assert stage_profile(tmp_path / "missing.json", "events", PROJECTOR_STAGES) == {}


def test_a_profile_since_a_snapshot_counts_only_what_was_added_after_it(tmp_path: Path) -> None:
    path = tmp_path / "stages.json"

    def write(decide: float, commands: int, process: float) -> None:
        seconds = {"decide": decide, "session_cached": decide / 10, "nats_read": 0.1}
        data = {"seconds": seconds, "units": {"commands": commands}, "process_cpu_s": process}
        path.write_text(json.dumps(data))

    write(decide=1.0, commands=10, process=3.0)  # start-up and warm-up
    before = snapshot(path)
    write(decide=3.0, commands=1010, process=7.0)
    profile = stage_profile(path, "commands", GATEWAY_STAGES, before)
    assert profile["decide"] == 2000.0
    assert profile["session"] == 200.0
    assert profile["nats_read"] == 0.0
    assert profile["other"] == 1800.0  # 4 s of process less 2.2 s bracketed, over 1000
    assert profile["gc"] == 0.0
    assert profile["total"] == 4000.0
    assert stage_profile(path, "commands", GATEWAY_STAGES, snapshot(path)) == {}


def test_compare_lists_each_figure_and_stage_with_its_change() -> None:
    def run(value: float, fold: float) -> dict[str, object]:
        return {
            "run": {"at": "t"},
            "figures": {"x": {"what": "projector catch-up", "value": value, "ratio": 0.5}},
            "scenarios": {
                "projector_10k": {"projector_stages_us_per_event": {"fold": fold}},
                "write_gateway": {"gateway_stages_us_per_command": {"decide": fold * 2}},
            },
        }

    table = compare(run(100.0, 50.0), run(150.0, 25.0))
    assert "| projector catch-up | 100 | 150 | +50 % | 0.50 | 0.50 |" in table
    assert "| fold | 50.00 | 25.00 | -50 % |" in table
    assert "write_gateway `gateway_stages_us_per_command`" in table
    assert "| decide | 100 | 50.00 | -50 % |" in table


def test_the_collector_is_its_own_stage_and_no_brackets(tmp_path: Path) -> None:
    profile = StageProfile(tmp_path / "stages.json")
    try:
        since = profile.now()
        gc.collect()
        profile.add("bracket", since)
    finally:
        gc.callbacks.remove(profile._on_gc)
    assert profile.seconds["gc"] > 0.0
    assert profile.seconds["bracket"] < profile.seconds["gc"]
