"""Generate the JSON Schema files of every wire model into `contracts/schemas/`.

Run `reminders schemas` (or `python -m contracts.schema_gen`) after changing a model; a test
fails while the checked-in files are stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from contracts import agent_events, commands, events, replies
from contracts.spec import ReminderSpec
from contracts.state import SessionState

SCHEMA_DIR = Path(__file__).parent / "schemas"


def wire_models() -> dict[str, type[BaseModel]]:
    """Every model that crosses the wire, by schema file stem."""
    models: dict[str, type[BaseModel]] = {
        "reminder_spec": ReminderSpec,
        "event": events.Event,
        "session_state": SessionState,
        "error_reply": replies.ErrorReply,
    }
    for op, command in commands.COMMANDS.items():
        models[f"command.{op}"] = command
    for kind, payload in events.PAYLOADS.items():
        models[f"payload.{kind}"] = payload
    for reply in (
        replies.InjectedReply,
        replies.QueuedReply,
        replies.ClearReply,
        replies.CheckpointReply,
        replies.RevokeReply,
        replies.RenderReply,
        replies.EndTurnReply,
        replies.AlreadyAppliedReply,
        replies.CompactReply,
        replies.HandoffReply,
        replies.InheritReply,
        replies.EvaluateReply,
        replies.MuteReply,
        replies.UnmuteReply,
        replies.SanitizeReply,
    ):
        models[f"reply.{reply.__name__}"] = reply
    # Runtime events of the providers service (SPEC §9.1).
    models["agent_event"] = agent_events.RuntimeEvent
    for kind, runtime_payload in agent_events.RUNTIME_PAYLOADS.items():
        models[f"agent_payload.{kind}"] = runtime_payload
    return models


def render_schemas() -> dict[str, str]:
    """File name → JSON text, deterministic."""
    return {
        f"{stem}.json": json.dumps(model.model_json_schema(by_alias=True), indent=2, sort_keys=True)
        + "\n"
        for stem, model in sorted(wire_models().items())
    }


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Rewrite the schema files (and remove stale ones); returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = render_schemas()
    for stale in directory.glob("*.json"):
        if stale.name not in wanted:
            stale.unlink()
    written = []
    for name, text in wanted.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_schemas():
        sys.stdout.write(f"{path}\n")
