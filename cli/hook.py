"""`reminders hook RUNTIME`: the ledger as a runtime's command hook (docs/integrations.md)."""

from __future__ import annotations

import asyncio
import logging
import sys

import orjson
import typer

from cli.options import nats_option, resolve_nats

hook_app = typer.Typer(
    help="Answer an agent runtime's hooks from the ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@hook_app.command("claude-code")
def claude_code(
    nats_url: str | None = nats_option(),
    session_id: str | None = typer.Option(
        None, "--session-id", help="Ledger session (default: Claude Code's session_id)."
    ),
    agent_id: str | None = typer.Option(None, "--agent-id", help="Agent id for runtime events."),
    max_tokens: int | None = typer.Option(
        None,
        "--max-tokens",
        min=1,
        help="Render budget in tokens (default REMINDERS_RENDER_MAX_TOKENS, else none).",
    ),
    render_format: str | None = typer.Option(
        None, "--format", help="context-directives (the default) or system-reminder."
    ),
) -> None:
    """Read one Claude Code hook event (JSON) on stdin and print the hook's JSON answer."""
    from client.integrations.claude_code import answer_hook
    from client.integrations.ledger import ReminderOptions

    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="reminders hook: %(message)s"
    )
    try:
        event = orjson.loads(sys.stdin.buffer.read())
    except orjson.JSONDecodeError as exc:
        typer.echo(f"error: the hook input is not JSON ({exc.msg})", err=True)
        raise typer.Exit(1) from None
    if not isinstance(event, dict):
        typer.echo("error: the hook input is not a JSON object", err=True)
        raise typer.Exit(1)
    options = ReminderOptions(
        session_id=session_id,
        agent_id=agent_id,
        max_tokens=max_tokens,
        format=render_format,
        nats_url=resolve_nats(nats_url),
    )
    answer = asyncio.run(answer_hook(event, options)).to_json()
    if answer is not None:
        sys.stdout.write(orjson.dumps(answer).decode() + "\n")
