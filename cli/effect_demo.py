"""The effect part of `reminders up --demo` (SPEC §12.3, §12.4, §12.6): on the demo session,
one reminder acknowledged as acted by the host, one dismissed by the model through the MCP
tool `acknowledge_reminder` (the MCP server of `reminders mcp`, run in-process and called with
the MCP SDK's client), one that expires at its wall-clock deadline; then the effect report of
the session, counted from its log."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp.shared.memory import create_connected_server_and_client_session
from nats.aio.client import Client
from rich.console import Console

from cli.mcp_server import build_server
from cli.stats import table_text
from client.sdk import ReminderClient
from replay.source import rows_from_nats
from replay.stats import effect_report

#: Seconds until the demo's timed reminder reaches its deadline.
DEADLINE_S = 2.0


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def effect_script(session: str, expires_at: str) -> list[tuple[str, dict[str, Any]]]:
    """Three reminders and a render that delivers them at turn 3."""
    return [
        (
            "inject",
            {
                "session_id": session,
                "reminder": {
                    "body": "Run the test suite before you commit.",
                    "id": "effect-tests",
                    "tags": ["tests"],
                    "source": "hook",
                },
            },
        ),
        (
            "inject",
            {
                "session_id": session,
                "reminder": {
                    "body": "Consider renaming helper.py to something that says what it does.",
                    "id": "effect-naming",
                    "tags": ["style"],
                    "authority": "advisory",
                },
            },
        ),
        (
            "inject",
            {
                "session_id": session,
                "reminder": {
                    "body": "The deploy window is open: deploy now or wait for the next one.",
                    "id": "effect-deploy",
                    "tags": ["deploy"],
                    "expires_at": expires_at,
                },
            },
        ),
        ("render", {"session_id": session, "turn": 3}),
    ]


def _said(console: Console, what: str, reply: dict[str, Any]) -> None:
    outcome = "ok" if reply.get("ok") else f"refused: {reply.get('error', {}).get('code')}"
    console.print(f"  {what} → {outcome} (session_seq {reply.get('session_seq', '—')})")


async def run_effect_demo(
    nc: Client, client: ReminderClient, console: Console, session: str, stream: str
) -> dict[str, Any]:
    """Drive the effect steps on `session` and print its effect report; returns the report."""
    console.rule(f"[bold]did the reminders work? ({session})")
    deadline = datetime.now(UTC) + timedelta(seconds=DEADLINE_S)
    for op, command in effect_script(session, _iso(deadline)):
        reply = await client.request(op, command)
        name = command.get("reminder", {}).get("id") or f"turn {command.get('turn')}"
        _said(console, f"{op} {name}", reply)
    acted = await client.request(
        "acknowledge",
        {
            "session_id": session,
            "reminder_id": "effect-tests",
            "turn": 3,
            "outcome": "acted",
            "note": "the suite ran green before the commit",
        },
    )
    _said(console, "the host acknowledged effect-tests as acted", acted)
    async with create_connected_server_and_client_session(build_server(client)) as mcp:
        result = await mcp.call_tool(
            "acknowledge_reminder",
            {
                "session_id": session,
                "reminder_id": "effect-naming",
                "turn": 3,
                "outcome": "dismissed",
                "note": "not relevant to this task",
            },
        )
    dismissed = result.structuredContent or {"ok": False}
    _said(
        console,
        "the model dismissed effect-naming through the MCP tool acknowledge_reminder",
        dismissed,
    )
    await asyncio.sleep(max(0.0, (deadline - datetime.now(UTC)).total_seconds()) + 0.2)
    ended = await client.request("end_turn", {"session_id": session, "turn": 3})
    _said(console, f"end_turn 3 after {deadline.strftime('%H:%M:%S')} UTC", ended)
    rows = await rows_from_nats(nc, stream, session)
    expired = [
        row.envelope["payload"]["reminder_id"]
        for row in rows
        if row.envelope["kind"] == "expired" and row.envelope["payload"]["reason"] == "deadline"
    ]
    console.print(f"  expired at its deadline: {', '.join(expired) or 'none'}")
    report = effect_report([rows]).to_json()
    console.print(f"[bold]effect report of {session}[/bold] (reminders stats {session})")
    console.print(table_text(report), end="", highlight=False, soft_wrap=True)
    return report
