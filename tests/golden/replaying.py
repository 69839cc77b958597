"""Fold export rows the way replay does, for the golden tests."""

from __future__ import annotations

from typing import Any

from contracts.events import Event
from contracts.state import SessionState
from core import fold_all


def replay_rows(rows: list[dict[str, Any]]) -> SessionState:
    """Fold export rows (envelope plus stream_seq and subject) from an empty state."""
    pairs = []
    for row in rows:
        envelope = {k: v for k, v in row.items() if k not in ("stream_seq", "subject")}
        pairs.append((Event.model_validate(envelope), int(row["stream_seq"])))
    return fold_all(SessionState(), pairs)
