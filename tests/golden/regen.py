"""Regenerate the golden logs from their command scripts (run after an intended rule change).

`python -m tests.golden.regen` rewrites, for every `NAME.commands.json`, the log
`NAME.events.jsonl` (export format: the envelope plus `stream_seq` and `subject`) and the
expected canonical state `NAME.state.json`. Review the diff before committing it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contracts.state import SessionState
from core import CoreConfig, canonical_json, fold_all, handle
from core.canonical import event_subject
from tests.support import context_for

GOLDEN_DIR = Path(__file__).parent


def decide_script(script: dict[str, Any]) -> list[dict[str, Any]]:
    """The export rows the script's commands append, with deterministic contexts."""
    config = CoreConfig.model_validate(script.get("config", {}))
    state = SessionState()
    rows: list[dict[str, Any]] = []
    for n, (op, raw) in enumerate(script["commands"], start=1):
        decision = handle(state, op, raw, context_for(n, "g0lden"), config)
        for event in decision.events:
            rows.append(
                {
                    **event.to_wire(),
                    "stream_seq": len(rows) + 1,
                    "subject": event_subject(event.kind, event.session_id),
                }
            )
        state = fold_all(state, decision.events)
    return rows


def state_text(state: SessionState) -> str:
    """The canonical state bytes replay prints: sorted keys, UTF-8, newline at the end."""
    return canonical_json(state.model_dump(mode="json")) + "\n"


def log_text(rows: list[dict[str, Any]]) -> str:
    """JSON Lines of export rows, canonical form."""
    return "".join(canonical_json(row) + "\n" for row in rows)


def scripts() -> list[Path]:
    """Every golden command script."""
    return sorted(GOLDEN_DIR.glob("*.commands.json"))


def main() -> None:
    """Rewrite every golden log and state."""
    from tests.golden.replaying import replay_rows

    for path in scripts():
        name = path.name.removesuffix(".commands.json")
        rows = decide_script(json.loads(path.read_text(encoding="utf-8")))
        (GOLDEN_DIR / f"{name}.events.jsonl").write_text(log_text(rows), encoding="utf-8")
        (GOLDEN_DIR / f"{name}.state.json").write_text(
            state_text(replay_rows(rows)), encoding="utf-8"
        )
        print(f"{name}: {len(rows)} events")


if __name__ == "__main__":
    main()
