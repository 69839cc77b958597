"""`reminders mcp`: the ledger as an MCP server on stdio, for any MCP host.

Tools: `inject_reminder`, `clear_reminders`, `revoke_reminder` (commands, SPEC §4),
`mute_reminders`, `unmute_reminders`, `sanitize_tool_output` (cost and control, §12),
`acknowledge_reminder` (effect, §12.3: `by` defaults to `model` here, the caller of an MCP
tool being a model) and
`session_state`, `pending_injections` (queries, §4.10). An ok reply comes back as the tool's
structured content (and as JSON text); an `ok: false` reply is a tool error (`isError: true`)
whose text starts with the SPEC §2.2 code, e.g. `HARN-RMD-001: unknown option(s): colour`,
with the whole error as structured content. Nothing here logs an argument or a reply, and
stdout belongs to the MCP protocol alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import version as package_version
from typing import Any

import orjson
from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, TextContent

from client.sdk import ReminderClient
from contracts.errors import ReminderError
from services.adapters.connection import CLI_CONNECT_TIMEOUT_S, connect
from services.adapters.settings import Settings

INSTRUCTIONS = (
    "Reminder Ledger: event-sourced system reminders for LLM agent sessions. Inject, clear and "
    "revoke reminders of a session, mute them, sanitize tool output, say whether a reminder "
    "was acted on, ignored or should be dismissed (acknowledge_reminder), and read the "
    "session's state and pending injections. Errors carry "
    "the ledger's code (HARN-RMD-001, unknown_reminder_id, too_many, ...) at the start."
)


def _result(reply: dict[str, Any]) -> CallToolResult:
    """A ledger reply as an MCP tool result (`isError` for `ok: false`)."""
    if reply.get("ok"):
        return CallToolResult(
            content=[TextContent(type="text", text=orjson.dumps(reply).decode())],
            structuredContent=reply,
            isError=False,
        )
    error = reply.get("error") or {}
    code = str(error.get("code", "invalid_request"))
    text = f"{code}: {error.get('message', '')}".rstrip(": ")
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structuredContent={"ok": False, "error": error},
        isError=True,
    )


def _given(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


Ask = Callable[[str, dict[str, Any]], Awaitable[CallToolResult]]
"""How a tool asks the ledger: op and payload in, the tool result out."""


def build_server(ledger: ReminderClient) -> FastMCP:
    """The MCP server, its tools bound to one ledger client."""
    server = FastMCP("reminder-ledger", instructions=INSTRUCTIONS, log_level="WARNING")
    # FastMCP takes no version and reports the MCP SDK's as the server's own (serverInfo).
    server._mcp_server.version = package_version("reminder-ledger")

    async def ask(op: str, payload: dict[str, Any]) -> CallToolResult:
        try:
            return _result(await ledger.request(op, payload))
        except ReminderError as exc:  # no gateway answered
            return _result({"ok": False, "error": exc.to_body().model_dump(mode="json")})

    _command_tools(server, ask)
    _control_tools(server, ask)
    _query_tools(server, ask)
    return server


def _command_tools(server: FastMCP, ask: Ask) -> None:
    """The commands of SPEC §4: inject, clear, revoke."""

    @server.tool()
    async def inject_reminder(
        session_id: str,
        body: str,
        mode: str | None = None,
        id: str | None = None,
        tags: list[str] | None = None,
        dedupe_key: str | None = None,
        ttl_turns: int | None = None,
        preserve_on_compact: bool | None = None,
        propagate: str | None = None,
        authority: str | None = None,
        role_hint: str | None = None,
        fired_at_turn: int | None = None,
        not_before: str | None = None,
        expires_at: str | None = None,
        agent_id: str | None = None,
        request_id: str | None = None,
    ) -> CallToolResult:
        """Add a reminder to a session (`inject`). Without `mode` it is pending at once; with
        `mode` (interrupt_immediate, finish_step, audit_only or an alias) it is queued until a
        seam drains it. Other arguments are ReminderSpec fields (SPEC §2); not_before and
        expires_at are RFC 3339 times (any offset)."""
        reminder = _given(
            body=body,
            id=id,
            tags=tags,
            dedupe_key=dedupe_key,
            ttl_turns=ttl_turns,
            preserve_on_compact=preserve_on_compact,
            propagate=propagate,
            authority=authority,
            role_hint=role_hint,
            fired_at_turn=fired_at_turn,
            not_before=not_before,
            expires_at=expires_at,
        )
        payload = _given(session_id=session_id, mode=mode, agent_id=agent_id, request_id=request_id)
        return await ask("inject", {**payload, "reminder": reminder})

    @server.tool()
    async def clear_reminders(
        session_id: str,
        id: str | None = None,
        tag: str | None = None,
        dedupe_key: str | None = None,
        request_id: str | None = None,
    ) -> CallToolResult:
        """Expire the live reminders of a session matching every given selector (`clear`);
        at least one of id, tag, dedupe_key."""
        selector = _given(id=id, tag=tag, dedupe_key=dedupe_key)
        payload = _given(session_id=session_id, request_id=request_id)
        return await ask("clear", {**payload, "selector": selector})

    @server.tool()
    async def revoke_reminder(
        session_id: str, reminder_id: str, request_id: str | None = None
    ) -> CallToolResult:
        """Withdraw a queued reminder (`revoke`): status revoked or already_revoked; errors
        already_delivered and unknown_reminder_id."""
        return await ask(
            "revoke",
            _given(session_id=session_id, reminder_id=reminder_id, request_id=request_id),
        )


def _control_tools(server: FastMCP, ask: Ask) -> None:
    """Cost, control and effect (SPEC §12): mute, unmute, sanitize, acknowledge."""

    @server.tool()
    async def mute_reminders(
        session_id: str,
        source: str | None = None,
        tag: str | None = None,
        provider_id: str | None = None,
        dedupe_key: str | None = None,
        until_turn: int | None = None,
        request_id: str | None = None,
    ) -> CallToolResult:
        """Hold back the live reminders of a session matching every given selector (`mute`,
        SPEC §12.2): they stay live but are not rendered; a muted provider_id injects
        nothing. Ends after until_turn, or at unmute_reminders with the returned mute_id."""
        selector = _given(source=source, tag=tag, provider_id=provider_id, dedupe_key=dedupe_key)
        payload = _given(session_id=session_id, until_turn=until_turn, request_id=request_id)
        return await ask("mute", {**payload, "selector": selector})

    @server.tool()
    async def unmute_reminders(
        session_id: str, mute_id: str, request_id: str | None = None
    ) -> CallToolResult:
        """End a mute (`unmute`); an unknown or ended mute_id is unknown_mute_id."""
        return await ask(
            "unmute", _given(session_id=session_id, mute_id=mute_id, request_id=request_id)
        )

    @server.tool()
    async def sanitize_tool_output(
        session_id: str, text: str, turn: int, tool_name: str | None = None
    ) -> CallToolResult:
        """Escape every tag shaped like a reminder envelope (context-directives, directive,
        system-reminder) in a tool's output before the model reads it (`sanitize`, SPEC
        §12.5): returns the text and how many tags were neutralized."""
        return await ask(
            "sanitize", _given(session_id=session_id, text=text, turn=turn, tool_name=tool_name)
        )

    @server.tool()
    async def acknowledge_reminder(
        session_id: str,
        reminder_id: str,
        turn: int,
        outcome: str,
        by: str = "model",
        note: str | None = None,
        request_id: str | None = None,
    ) -> CallToolResult:
        """Say what became of a reminder (`acknowledge`, SPEC §12.3): outcome acted (you did
        what it asked), ignored (it had no effect) or dismissed (it should go: it is removed).
        by is model (default), host or operator; note at most 256 characters. A repeat of the
        same outcome answers already_acknowledged: true and records nothing."""
        return await ask(
            "acknowledge",
            _given(
                session_id=session_id,
                reminder_id=reminder_id,
                turn=turn,
                outcome=outcome,
                by=by,
                note=note,
                request_id=request_id,
            ),
        )


def _query_tools(server: FastMCP, ask: Ask) -> None:
    """The queries of SPEC §4.10: state and pending injections."""

    @server.tool()
    async def session_state(
        session_id: str, min_seq: int | None = None, timeout_ms: int | None = None
    ) -> CallToolResult:
        """The projected state of a session (`state`, SPEC §6.2), with every command answered
        before this call applied (`stale: true` if the projection lagged past timeout_ms)."""
        return await ask(
            "state", _given(session_id=session_id, min_seq=min_seq, timeout_ms=timeout_ms)
        )

    @server.tool()
    async def pending_injections(session_id: str, timeout_ms: int | None = None) -> CallToolResult:
        """The queued reminders of a session in FIFO order (`pending_injections`)."""
        return await ask("pending_injections", _given(session_id=session_id, timeout_ms=timeout_ms))


async def serve_stdio(settings: Settings) -> None:
    """Connect to NATS (fails fast with `NatsUnreachable`), then serve MCP on stdio."""
    nc = await connect(
        settings, "reminders-mcp", startup_timeout_s=CLI_CONNECT_TIMEOUT_S, fail_fast=True
    )
    try:
        # Tenants (SPEC §10.1): a tenant's host names its tenant (REMINDERS_TENANT).
        ledger = ReminderClient(nc, timeout_s=settings.request_timeout_s, tenant=settings.tenant)
        await build_server(ledger).run_stdio_async()
    finally:
        await nc.drain()
