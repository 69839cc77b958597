"""Golden logs under tests/golden/ replay to their expected canonical states, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden.regen import GOLDEN_DIR, decide_script, log_text, scripts, state_text
from tests.golden.replaying import replay_rows

NAMES = [path.name.removesuffix(".commands.json") for path in scripts()]


def read_rows(name: str) -> list[dict[str, object]]:
    text = (GOLDEN_DIR / f"{name}.events.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_there_are_golden_logs_to_replay() -> None:
    assert len(NAMES) >= 3


@pytest.mark.parametrize("name", NAMES)
def test_replaying_a_golden_log_gives_its_expected_state_byte_for_byte(name: str) -> None:
    expected = (GOLDEN_DIR / f"{name}.state.json").read_bytes()
    assert state_text(replay_rows(read_rows(name))).encode("utf-8") == expected


@pytest.mark.parametrize("name", NAMES)
def test_deciding_a_golden_script_again_appends_exactly_the_golden_log(name: str) -> None:
    script = json.loads((GOLDEN_DIR / f"{name}.commands.json").read_text(encoding="utf-8"))
    expected = (GOLDEN_DIR / f"{name}.events.jsonl").read_text(encoding="utf-8")
    assert log_text(decide_script(script)) == expected


def test_golden_logs_are_stored_in_canonical_form() -> None:
    for name in NAMES:
        rows = read_rows(name)
        assert log_text(rows) == (GOLDEN_DIR / f"{name}.events.jsonl").read_text("utf-8")


def test_a_golden_state_file_ends_with_one_newline_and_holds_sorted_keys() -> None:
    for name in NAMES:
        text = (Path(GOLDEN_DIR) / f"{name}.state.json").read_text(encoding="utf-8")
        assert text.endswith("}\n") and not text.endswith("\n\n")
        assert list(json.loads(text)) == sorted(json.loads(text))
