"""Logs written before the render summary existed (SPEC §12.1) still replay byte for byte
and pass `--verify`: a rule added later never makes an old log unreadable or divergent.

`tests/golden/legacy/` holds the golden logs exactly as an earlier build wrote them, with
the states they replayed to then.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.source import rows_from_file
from replay.verify import verify
from tests.golden.regen import state_text
from tests.golden.replaying import replay_rows
from tests.unit.test_golden_logs import read_rows

LEGACY = Path(__file__).parents[1] / "golden" / "legacy"
NAMES = sorted(path.name.removesuffix(".events.jsonl") for path in LEGACY.glob("*.events.jsonl"))


def test_there_are_legacy_logs() -> None:
    assert len(NAMES) >= 3


@pytest.mark.parametrize("name", NAMES)
def test_a_legacy_log_replays_to_its_state_byte_for_byte(name: str) -> None:
    rows = read_rows(f"legacy/{name}")
    assert all("summary" not in row["payload"] for row in rows if row["kind"] == "delivered"), (
        "a legacy log is one written before delivered carried a summary"
    )
    expected = (LEGACY / f"{name}.state.json").read_bytes()
    assert state_text(replay_rows(rows)).encode("utf-8") == expected


@pytest.mark.parametrize("name", NAMES)
def test_a_legacy_log_passes_verify(name: str) -> None:
    assert verify(rows_from_file(LEGACY / f"{name}.events.jsonl")) is None
