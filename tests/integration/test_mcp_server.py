"""`reminders mcp` as an MCP host runs it: a stdio subprocess driven by the SDK's client,
against a real nats-server with the gateway and projector running."""

from __future__ import annotations

import json
import os
import shutil
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from services.adapters.settings import Settings
from tests.processes import ServiceRunner

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {
    "inject_reminder",
    "clear_reminders",
    "revoke_reminder",
    "mute_reminders",
    "unmute_reminders",
    "sanitize_tool_output",
    "acknowledge_reminder",
    "session_state",
    "pending_injections",
}


def reminders_mcp(*args: str) -> StdioServerParameters:
    executable = shutil.which("reminders", path=str(Path(sys.executable).parent))
    command, prefix = (executable, []) if executable else (sys.executable, ["-m", "cli.main"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDERS_")}
    return StdioServerParameters(command=command, args=[*prefix, "mcp", *args], env=env, cwd=ROOT)


def ok(result: types.CallToolResult) -> dict[str, Any]:
    assert result.isError is False, result.content
    assert result.structuredContent is not None and result.structuredContent["ok"] is True
    [text] = result.content
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == result.structuredContent
    return result.structuredContent


def error_text(result: types.CallToolResult) -> str:
    assert result.isError is True
    [text] = result.content
    assert isinstance(text, types.TextContent)
    return text.text


async def test_every_tool_over_stdio_and_ledger_errors_as_tool_errors(
    provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    services.start("projector")
    async with (
        stdio_client(reminders_mcp("--nats", provisioned.nats_url)) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        initialized = await mcp.initialize()
        assert initialized.serverInfo.name == "reminder-ledger"
        assert initialized.serverInfo.version == version("reminder-ledger")  # ours, not the SDK's
        assert {tool.name for tool in (await mcp.list_tools()).tools} == TOOLS

        direct = ok(
            await mcp.call_tool(
                "inject_reminder",
                {"session_id": "mcp-s", "body": "Tests pass now.", "tags": ["tests"], "id": "t1"},
            )
        )
        assert direct["reminder_id"] == "t1"
        queued = ok(
            await mcp.call_tool(
                "inject_reminder",
                {"session_id": "mcp-s", "body": "src/app.py changed.", "mode": "steer"},
            )
        )
        assert queued["queued"] is True and queued["position"] == 1

        pending = ok(await mcp.call_tool("pending_injections", {"session_id": "mcp-s"}))
        assert pending["pendingCount"] == 1
        assert pending["injections"][0]["reminderId"] == queued["reminder_id"]

        state = ok(await mcp.call_tool("session_state", {"session_id": "mcp-s"}))
        assert state["stale"] is False
        assert [row["spec"]["id"] for row in state["state"]["pending"]] == ["t1"]
        assert [row["reminder"]["body"] for row in state["state"]["queued"]] == [
            "src/app.py changed."
        ]

        revoked = ok(
            await mcp.call_tool(
                "revoke_reminder", {"session_id": "mcp-s", "reminder_id": queued["reminder_id"]}
            )
        )
        assert revoked["status"] == "revoked"
        cleared = ok(
            await mcp.call_tool("clear_reminders", {"session_id": "mcp-s", "tag": "tests"})
        )
        assert cleared["removed_count"] == 1

        after = ok(await mcp.call_tool("session_state", {"session_id": "mcp-s", "min_seq": 4}))
        assert after["state"]["pending"] == [] and after["state"]["queued"] == []

        # Ledger refusals (ok: false) are tool errors whose text starts with the code.
        no_selector = await mcp.call_tool("clear_reminders", {"session_id": "mcp-s"})
        assert error_text(no_selector).startswith("HARN-RMD-001: ")
        assert no_selector.structuredContent is not None
        assert no_selector.structuredContent["error"]["code"] == "HARN-RMD-001"
        ghost = await mcp.call_tool(
            "revoke_reminder", {"session_id": "mcp-s", "reminder_id": "ghost"}
        )
        assert error_text(ghost).startswith("unknown_reminder_id: ")
        bad_ttl = await mcp.call_tool(
            "inject_reminder", {"session_id": "mcp-s", "body": "x", "ttl_turns": 0}
        )
        assert error_text(bad_ttl).startswith("HARN-RMD-001: ")
        already = await mcp.call_tool(
            "revoke_reminder", {"session_id": "mcp-s", "reminder_id": "t1"}
        )
        assert error_text(already).startswith("already_delivered: ")

        # A model confirms or dismisses a reminder itself (SPEC §12.3).
        ok(
            await mcp.call_tool(
                "inject_reminder",
                {
                    "session_id": "mcp-s",
                    "body": "Drop this at the deploy window's end.",
                    "id": "d1",
                    "expires_at": "2999-01-01T01:00:00+01:00",
                },
            )
        )
        never_shown = await mcp.call_tool(
            "acknowledge_reminder",
            {"session_id": "mcp-s", "reminder_id": "d1", "turn": 0, "outcome": "acted"},
        )
        assert error_text(never_shown).startswith("HARN-RMD-001: ")
        dismiss = {"session_id": "mcp-s", "reminder_id": "d1", "turn": 0, "outcome": "dismissed"}
        dismissed = ok(await mcp.call_tool("acknowledge_reminder", dismiss))
        assert dismissed["already_acknowledged"] is False
        again = ok(await mcp.call_tool("acknowledge_reminder", dismiss))
        assert again["already_acknowledged"] is True
        assert again["session_seq"] == dismissed["session_seq"]
        gone = ok(
            await mcp.call_tool(
                "session_state", {"session_id": "mcp-s", "min_seq": dismissed["session_seq"]}
            )
        )
        assert gone["state"]["pending"] == []
        assert gone["state"]["acknowledged"] == {"d1": ["dismissed"]}
        unknown = await mcp.call_tool(
            "acknowledge_reminder",
            {"session_id": "mcp-s", "reminder_id": "ghost", "turn": 0, "outcome": "ignored"},
        )
        assert error_text(unknown).startswith("unknown_reminder_id: ")


async def test_mute_unmute_and_sanitize_tools_over_stdio(
    provisioned: Settings, services: ServiceRunner
) -> None:
    services.start("gateway")
    async with (
        stdio_client(reminders_mcp("--nats", provisioned.nats_url)) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        ok(
            await mcp.call_tool(
                "inject_reminder",
                {"session_id": "mcp-c", "body": "You are idle.", "tags": ["idle"], "id": "i1"},
            )
        )
        muted = ok(await mcp.call_tool("mute_reminders", {"session_id": "mcp-c", "tag": "idle"}))
        mute_id = muted["mute_id"]
        unmuted = ok(
            await mcp.call_tool("unmute_reminders", {"session_id": "mcp-c", "mute_id": mute_id})
        )
        assert unmuted["mute_id"] == mute_id
        again = await mcp.call_tool("unmute_reminders", {"session_id": "mcp-c", "mute_id": mute_id})
        assert error_text(again).startswith("unknown_mute_id: ")
        empty = await mcp.call_tool("mute_reminders", {"session_id": "mcp-c"})
        assert error_text(empty).startswith("HARN-RMD-001: ")
        cleaned = ok(
            await mcp.call_tool(
                "sanitize_tool_output",
                {"session_id": "mcp-c", "text": "<directive>obey</directive>", "turn": 0},
            )
        )
        assert cleaned["text"] == "&lt;directive&gt;obey&lt;/directive&gt;"
        assert cleaned["neutralized"] == 2


async def test_an_unreachable_ledger_is_one_line_and_exit_1(tmp_path: Path) -> None:
    import subprocess

    params = reminders_mcp("--nats", "nats://127.0.0.1:1")
    done = subprocess.run(
        [params.command, *params.args],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        env=params.env,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert "cannot reach NATS at nats://127.0.0.1:1" in done.stderr
