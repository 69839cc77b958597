"""An MCP server built with the official SDK that sends reminders as the proposal says:
`notifications/reminder` and the fallback `notifications/message` with `_meta.harn.reminder`.

Run as a stdio subprocess by tests/integration/test_mcp_bridge.py: its one tool, `emit`, sends
the notifications the test asks for (over stdout, like any MCP server) and then returns.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp import types
from mcp.server.fastmcp import Context, FastMCP


class ReminderNotification(types.Notification[dict[str, Any], Literal["notifications/reminder"]]):
    """The proposal's notification; not in the core MCP schema, so declared here."""


server = FastMCP("reminding-server", log_level="WARNING")


@server.tool()
async def emit(session_id: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Send the test's reminder notifications, related to this request."""
    session = ctx.session
    related = ctx.request_id
    reminder = ReminderNotification(
        method="notifications/reminder",
        params={
            "reminder": {
                "id": "lint-1",
                "body": "Lint is failing in src/app.py.",
                "tags": ["lint"],
                "dedupeKey": "lint",
                "ttlTurns": 1,
                "roleHint": "developer",
                "propagate": "none",
            },
            "_meta": {"sessionId": session_id},
        },
    )
    await session.send_notification(reminder, related)  # type: ignore[arg-type]
    fallback = types.LoggingMessageNotification(
        method="notifications/message",
        params=types.LoggingMessageNotificationParams.model_validate(
            {
                "level": "info",
                "data": "tests finished",
                "_meta": {
                    "sessionId": session_id,
                    "harn": {"reminder": {"body": "Tests pass now.", "ttlTurns": 2}},
                },
            }
        ),
    )
    await session.send_notification(types.ServerNotification(fallback), related)
    # No session named: the bridge's default session gets it.
    unnamed = ReminderNotification(
        method="notifications/reminder",
        params={"reminder": {"body": "Check the default session.", "tags": ["default"]}},
    )
    await session.send_notification(unnamed, related)  # type: ignore[arg-type]
    # Wrong shape (`content` instead of `body`): the ledger refuses it with HARN-RMD-002.
    wrong = ReminderNotification(
        method="notifications/reminder",
        params={"reminder": {"content": "not a body"}, "_meta": {"sessionId": session_id}},
    )
    await session.send_notification(wrong, related)  # type: ignore[arg-type]
    # An ordinary log message: no reminder, nothing for the ledger.
    await session.send_log_message("info", "just a log line", related_request_id=related)
    return "sent"


if __name__ == "__main__":
    server.run("stdio")
