"""A scripted agent session, driven through the pure core and printed turn by turn.

The same script later runs through the bus (`reminders up --demo`); here it shows a newcomer
what the rules decide without any server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from contracts.state import SessionState
from core import canonical_json, fold_all, handle
from core.config import CoreConfig
from services.adapters.ids import fresh_context

DEMO_SESSION = "demo-session"
DEMO_CHILD = "demo-child"


def demo_script(
    session: str = DEMO_SESSION, child: str = DEMO_CHILD
) -> list[tuple[str, dict[str, Any]]]:
    """(op, command) pairs: one agent session over three turns, a compaction and a handoff.

    `up --demo` drives it under fresh ids on every run (`demo-session-2`, … on a data
    directory that already holds the earlier runs), so a run never replays into an old one.
    """
    return [
        (
            "inject",
            {
                "session_id": session,
                "reminder": {
                    "body": "Token budget at 72 %: prefer concise answers.",
                    "dedupe_key": "token_pressure",
                    "ttl_turns": 2,
                    "authority": "corrective",
                    "source": "stdlib_provider",
                },
            },
        ),
        (
            "inject",
            {
                "session_id": session,
                "reminder": {
                    "body": "Work only inside /srv/app; never touch /etc.",
                    "tags": ["workspace"],
                    "preserve_on_compact": True,
                    "propagate": "all",
                },
            },
        ),
        (
            "inject",
            {
                "session_id": session,
                "mode": "steer",
                "reminder": {
                    "body": "The file src/app.py changed on disk since you last read it.",
                    "tags": ["file_watch"],
                    "ttl_turns": 1,
                    "authority": "advisory",
                    "source": "hook",
                },
            },
        ),
        ("checkpoint", {"session_id": session, "seam": "turn_start", "turn": 0}),
        ("render", {"session_id": session, "turn": 0, "user_text": "Fix the failing test."}),
        ("end_turn", {"session_id": session, "turn": 0}),
        (
            "inject",
            {
                "session_id": session,
                "reminder": {
                    "body": "Token budget at 86 %: summarise before reading more files.",
                    "dedupe_key": "token_pressure",
                    "ttl_turns": 2,
                    "authority": "corrective",
                    "source": "stdlib_provider",
                },
            },
        ),
        ("render", {"session_id": session, "turn": 1}),
        ("end_turn", {"session_id": session, "turn": 1}),
        ("compact", {"session_id": session, "turn": 2}),
        ("render", {"session_id": session, "turn": 2, "format": "system-reminder"}),
        (
            "handoff",
            {"session_id": session, "child_session_id": child, "sub_agent_id": "test-runner"},
        ),
        (
            "inject",
            {
                "session_id": session,
                "mode": "interrupt",
                "reminder": {
                    "body": "The user asked for a status update: stop and summarise.",
                    "id": "status-1",
                    "source": "hook",
                },
            },
        ),
    ]


#: The script under its first-run ids (what `reminders demo` and the tests use).
DEMO_SCRIPT: list[tuple[str, dict[str, Any]]] = demo_script()


def run_script(
    script: list[tuple[str, dict[str, Any]]], config: CoreConfig | None = None
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]]]]:
    """Decide each command in turn; yields (op, command, reply, events as wire dicts)."""
    states: dict[str, SessionState] = {}
    for op, command in script:
        session_id = command["session_id"]
        state = states.get(session_id, SessionState())
        decision = handle(state, op, command, fresh_context(), config)
        states[session_id] = fold_all(state, decision.events)
        yield op, command, decision.reply, [event.to_wire() for event in decision.events]


def print_step(
    console: Console,
    op: str,
    command: dict[str, Any],
    reply: dict[str, Any],
    events: list[dict[str, Any]],
) -> None:
    """One command of the demo: the command, the events it appended, the envelope."""
    console.rule(f"[bold]{op}[/bold]  {canonical_json(_without_session(command))}")
    for event in events:
        console.print(
            f"  [cyan]{event['kind']:<12}[/cyan] seq={event['session_seq']:<3} "
            f"turn={event['turn']:<2} chain={event['chain'][:12]}…"
        )
    envelope = reply.get("envelope")
    if envelope:
        console.print(
            Panel(
                envelope["text"],
                title=f"envelope · turn {envelope['turn_number']} · {envelope['format']}"
                f" · speaker {envelope['speaker']}",
            )
        )
    shown = {k: v for k, v in reply.items() if k not in ("envelope", "inline")}
    console.print(f"  reply: {canonical_json(shown)}", soft_wrap=True)


def print_log(console: Console, log: list[dict[str, Any]], title: str) -> None:
    """The event log as a table."""
    table = Table(title=f"{title} ({len(log)} events)")
    for column in ("stream_seq", "session_seq", "kind", "turn", "event_id", "chain"):
        table.add_column(column)
    for event in log:
        table.add_row(
            str(event.get("stream_seq", "-")),
            str(event["session_seq"]),
            event["kind"],
            str(event["turn"]),
            event["event_id"],
            event["chain"][:16] + "…",
        )
    console.print(table)


def print_projection(
    console: Console, session_id: str, state: dict[str, Any], pending: dict[str, Any]
) -> None:
    """The projected state of a session and its pending injections (SPEC §4.10).

    A reminder without a TTL (it lives until cleared, revoked or compacted) shows `∞`.
    """
    table = Table(
        title=f"projected state of {session_id} (session_seq {state['session_seq']},"
        f" stream_seq {state['stream_seq']}, turn {state['turn']})"
    )
    for column in ("reminder", "authority", "ttl_remaining", "delivered", "source"):
        table.add_column(column)
    for row in state["pending"]:
        spec = row["spec"]
        table.add_row(
            spec["id"],
            spec["authority"],
            "∞" if row["ttl_remaining"] is None else str(row["ttl_remaining"]),
            str(row["delivered"]),
            spec["source"],
        )
    console.print(table)
    console.print(
        f"  envelopes since compaction: {len(state['delivered'])} · compactions:"
        f" {state['compactions']} · chain_head {state['chain_head'][:16]}…"
    )
    rows = Table(title=f"pending injections of {session_id} ({pending['pendingCount']})")
    for column in ("position", "reminderId", "mode", "source"):
        rows.add_column(column)
    for injection in pending["injections"]:
        rows.add_row(
            str(injection["position"]),
            injection["reminderId"],
            injection["mode"],
            injection["source"],
        )
    console.print(rows)


def print_demo(console: Console, *, show_log: bool = True) -> None:
    """Run the demo script through the core and print it turn by turn."""
    log: list[dict[str, Any]] = []
    for op, command, reply, events in run_script(DEMO_SCRIPT):
        print_step(console, op, command, reply, events)
        log.extend(event for event in events if event["session_id"] == DEMO_SESSION)
    if show_log:
        print_log(console, log, f"event log of {DEMO_SESSION}")


def _without_session(command: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in command.items() if k != "session_id"}


#: Runtime events `reminders up --demo` publishes for the providers service (SPEC §9):
#: (kind, payload, turn) — a budget reading past 85 %, a truncated tool result, and a user
#: turn that the example content rule of `up`'s providers.toml matches.
DEMO_RUNTIME_EVENTS: list[tuple[str, dict[str, Any], int]] = [
    ("session_start", {"workspace_anchor": "/work/demo-repo", "roots": ["/work/demo-repo"]}, 0),
    ("budget", {"used_tokens": 172_000, "context_window": 200_000}, 1),
    (
        "tool_result",
        {"tool_name": "grep", "truncated": True, "original_bytes": 48_210, "shown_bytes": 8_192},
        1,
    ),
    ("user_turn", {"text": "Can I export this session for the auditors?"}, 2),
]

#: The providers configuration `up` writes on first run (when REMINDERS_PROVIDERS_CONFIG is
#: unset): every built-in with its defaults and one example content rule.
DEMO_PROVIDERS_TOML = """\
# Providers configuration for `reminders up` (SPEC §9.4), written on first run: edit freely.
# Every built-in provider is on; `providers = ["-idle_nudge"]` would disable one.
# The example rule below answers a user turn that asks about exports.
[[rules]]
id = "export-tip"
when = { content_pattern = "(?i)\\\\bexport" }
[rules.reminder]
body = "To hand a session to auditors: `reminders export SESSION -o FILE`."
ttl_turns = 1
"""


def print_provider_trail(console: Console, kind: str, events: list[dict[str, Any]]) -> None:
    """One runtime event of the demo: the reminders it caused and its evaluations."""
    console.rule(f"[bold]runtime event[/bold]  {kind}")
    for event in events:
        payload = event["payload"]
        if event["kind"] == "injected":
            body = payload["reminder"]["body"].replace("\n", " / ")[:90]
            console.print(
                f"  [green]injected[/green]  {payload['reminder_id'][:13]}… "
                f"tags={payload['tags']} — {body}"
            )
        elif event["kind"] == "provider_evaluated":
            mark = "[green]fired[/green]" if payload["fired"] else "[dim]quiet[/dim]"
            console.print(f"  {mark:<26} {payload['provider_id']:<22} {payload['reason']}")
        else:
            console.print(f"  [cyan]{event['kind']}[/cyan]")
