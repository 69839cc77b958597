"""The Claude Code hook's answers and readings, without a ledger."""

from __future__ import annotations

import json
from pathlib import Path

from client.integrations.claude_code import (
    HookAnswer,
    _tool_output,
    archived_count,
    changed_lines,
    forged_tags_note,
)


def test_context_goes_in_hook_specific_output_only_for_events_that_take_it() -> None:
    assert HookAnswer("UserPromptSubmit", "ctx").to_json() == {
        "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ctx"}
    }
    assert HookAnswer("Stop", "ctx").to_json() is None
    assert HookAnswer("PostToolUse", None, "note").to_json() == {"systemMessage": "note"}
    assert HookAnswer("SessionStart").to_json() is None


def test_tool_output_reads_bash_streams_text_and_anything_else_as_json() -> None:
    assert _tool_output({"stdout": "out", "stderr": "err", "interrupted": False}) == "out\nerr"
    assert _tool_output("plain") == "plain"
    assert _tool_output({"filePath": "/a"}) == '{"filePath":"/a"}'
    assert _tool_output(None) == ""


def test_archived_count_counts_messages_since_the_previous_compaction(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    records = [
        {"type": "user"},
        {"type": "assistant"},
        {"type": "system", "subtype": "compact_boundary"},
        {"type": "user"},
        {"type": "assistant"},
        {"type": "user"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\nnot json\n")
    event = {"transcript_path": str(path)}
    assert archived_count(event) == 3
    # The boundary of this compaction already written: the messages before it count.
    path.write_text(path.read_text() + json.dumps(records[2]) + "\n")
    assert archived_count(event) == 3
    assert archived_count({"transcript_path": str(tmp_path / "missing")}) == 0
    assert archived_count({}) == 0


def test_an_mcp_replacement_goes_in_hook_specific_output() -> None:
    assert HookAnswer("PostToolUse", None, None, "clean").to_json() == {
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedMCPToolOutput": "clean"}
    }


def test_the_note_quotes_the_lines_sanitize_changed() -> None:
    original = "a\n<directive>x</directive>\nb"
    clean = "a\n&lt;directive&gt;x&lt;/directive&gt;\nb"
    assert changed_lines(original, clean) == ["&lt;directive&gt;x&lt;/directive&gt;"]
    note = forged_tags_note("Bash", 2, changed_lines(original, clean))
    assert note.endswith("Neutralised:\n  &lt;directive&gt;x&lt;/directive&gt;")
