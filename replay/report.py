"""Human-readable audits of a replay: a per-turn text trail and a self-contained HTML page.

Both are pure functions of the replayed events, so the same log gives the same bytes.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import groupby

from contracts import events as ev
from replay.chart import chart
from replay.engine import ReplayResult
from replay.svg import chart_svg


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _describe_control(p: ev.Payload) -> str | None:
    """The cost, control and effect events (SPEC §12), or None for another kind."""
    if isinstance(p, ev.Withheld):
        return f"render at turn {p.turn_number} delivered nothing: {_cost(p.summary)}"
    if isinstance(p, ev.Muted):
        until = f"until turn {p.until_turn}" if p.until_turn is not None else "until unmuted"
        selector = ", ".join(f"{k} {v}" for k, v in p.selector.model_dump().items())
        return f"mute {p.mute_id} ({selector}) {until}"
    if isinstance(p, ev.Unmuted):
        return f"mute {p.mute_id} ended"
    if isinstance(p, ev.ForgedDirectiveNeutralized):
        tool = f" from {p.tool_name}" if p.tool_name else ""
        return (
            f"{p.count} forged directive tag(s) neutralized in a tool result{tool} "
            f"(input sha256 {p.input_sha256[:12]})"
        )
    if isinstance(p, ev.Acknowledged):
        note = f": {_short(p.note)!r}" if p.note else ""
        return (
            f"{p.reminder_id} acknowledged as {p.outcome} by {p.by} at turn {p.turn_number}{note}"
        )
    return None


def describe(event: ev.Event) -> str:
    """One line saying what an event records and why."""
    p = event.payload
    control = _describe_control(p)
    if control is not None:
        return control
    if isinstance(p, ev.Queued):
        return (
            f"{p.reminder.id} queued at position {p.position} for {p.mode}: "
            f"{_short(p.reminder.body)!r}"
        )
    if isinstance(p, ev.Injected):
        flags = [p.authority, f"ttl {p.ttl_turns}" if p.ttl_turns else "no ttl", p.source]
        if p.dedupe_key:
            flags.append(f"key {p.dedupe_key}")
        if p.audit_only:
            flags.append("audit only")
        if p.reminder.not_before:
            flags.append(f"not before {p.reminder.not_before}")
        if p.reminder.expires_at:
            flags.append(f"expires at {p.reminder.expires_at}")
        return f"{p.reminder_id} injected ({', '.join(flags)}): {_short(p.reminder.body)!r}"
    if isinstance(p, ev.Deduped):
        return f"{p.reminder_id} replaced {', '.join(p.replaced_ids)} (same key {p.dedupe_key})"
    if isinstance(p, ev.Revoked):
        return f"{p.reminder_id} revoked before it drained"
    if isinstance(p, ev.Fired):
        ttl = f", ttl {p.ttl_turns}" if p.ttl_turns is not None else ""
        return f"{p.reminder_id} fired at turn {p.turn_number} ({p.authority}{ttl})"
    if isinstance(p, ev.Delivered):
        cost = "" if p.summary is None else f", {_cost(p.summary)}"
        return (
            f"envelope delivered at turn {p.turn_number}: {len(p.directive_ids)} directive(s), "
            f"{p.format}, speaker {p.speaker}, sha256 {p.text_sha256[:12]}{cost}"
        )
    if isinstance(p, ev.PostTurn):
        return (
            f"turn {p.turn_number} ended: {p.expired_count} expired, "
            f"{p.decremented_count} decremented, {p.remaining_count} live"
        )
    if isinstance(p, ev.Expired):
        return (
            f"{p.reminder_id} expired: {p.reason} at {p.expired_at_boundary} of turn "
            f"{p.expired_at_turn} (ttl before {_ttl(p.ttl_turns_before)})"
        )
    if isinstance(p, ev.Dropped):
        return f"{p.reminder_id} dropped: {p.reason} ({p.code})"
    if isinstance(p, ev.Compacted):
        return (
            f"compacted at turn {p.turn_number}: kept {', '.join(p.preserved_ids) or 'nothing'}, "
            f"{p.directives_cleared} delivered directive(s) cleared"
        )
    if isinstance(p, ev.HandedOff):
        return (
            f"handed off to {p.child_session_id} ({p.sub_agent_id}): "
            f"{', '.join(p.propagated_ids) or 'nothing'}"
        )
    if isinstance(p, ev.Inherited):
        return f"{p.reminder_id} inherited from {p.parent_session_id} ({p.propagate})"
    assert isinstance(p, ev.ProviderEvaluated)
    outcome = f"fired → {p.reminder_id}" if p.fired else f"quiet ({p.reason})"
    if p.fired and p.reason != "fired":
        outcome += f" ({p.reason})"
    error = f" [{_short(p.error, 120)}]" if p.error else ""
    return f"provider {p.provider_id} on {p.event} {p.runtime_event_id}: {outcome}{error}"


def _cost(summary: ev.RenderSummary) -> str:
    """What a render cost and held back, in a few words (SPEC §12.1)."""
    budget = f" of {summary.budget_tokens}" if summary.budget_tokens is not None else ""
    words = [f"~{summary.est_tokens}{budget} tokens ({summary.estimator})"]
    if summary.over_budget:
        words.append("over budget")
    for reason, ids in (
        ("shed", summary.shed_ids),
        ("muted", summary.muted_ids),
        ("not yet due", summary.not_yet_ids),
        ("dropped", summary.dropped_ids),
    ):
        if ids:
            words.append(f"{reason} {', '.join(ids)}")
    return "; ".join(words)


def provider_trail(events: Iterable[ev.Event]) -> str | None:
    """One line of a turn's provider evaluations: which fired, which were skipped and why."""
    parts = [
        f"{e.payload.provider_id} {e.payload.reason}"
        for e in events
        if isinstance(e.payload, ev.ProviderEvaluated)
    ]
    return "providers: " + ", ".join(parts) if parts else None


def turn_tokens(events: Iterable[ev.Event]) -> int | None:
    """Estimated tokens of the envelopes delivered among `events` (SPEC §12.1), or None when
    none of them recorded a summary."""
    counted = [
        e.payload.summary.est_tokens
        for e in events
        if isinstance(e.payload, ev.Delivered) and e.payload.summary is not None
    ]
    return sum(counted) if counted else None


def _by_turn(events: Iterable[ev.Event]) -> list[tuple[int, list[ev.Event]]]:
    return [(turn, list(group)) for turn, group in groupby(events, key=lambda e: e.turn)]


def text_report(session_id: str, result: ReplayResult) -> str:
    """The per-turn trail."""
    lines = [
        f"session {session_id}: {len(result.events)} event(s), session_seq "
        f"{result.state.session_seq}, state sha256 {result.digest}",
    ]
    for turn, group in _by_turn(result.events):
        lines.append("")
        lines.append(f"turn {turn}")
        for event in group:
            lines.append(f"  #{event.session_seq:<4} {event.kind:<12} {describe(event)}")
            if isinstance(event.payload, ev.Delivered):
                lines.extend("      | " + line for line in event.payload.text.split("\n"))
        trail = provider_trail(group)
        if trail is not None:
            lines.append(f"  {trail}")
    lines.append("")
    live = ", ".join(row.spec.id or "" for row in result.state.pending) or "none"
    queued = ", ".join(row.reminder.id or "" for row in result.state.queued) or "none"
    lines.append(f"live at the end: {live}; queued: {queued}")
    return "\n".join(lines) + "\n"


@dataclass
class Life:
    """One reminder from injection to expiry."""

    reminder_id: str
    body: str = ""
    steps: list[str] = field(default_factory=list)


def lives(events: Iterable[ev.Event]) -> list[Life]:
    """Each reminder's life, in order of first appearance."""
    found: dict[str, Life] = {}

    def life(reminder_id: str) -> Life:
        return found.setdefault(reminder_id, Life(reminder_id))

    for event in events:
        p = event.payload
        where = f"#{event.session_seq} turn {event.turn}"
        if isinstance(p, ev.Queued):
            life(p.reminder.id or "").body = p.reminder.body
            life(p.reminder.id or "").steps.append(f"{where}: queued ({p.mode})")
        elif isinstance(p, ev.Injected):
            life(p.reminder_id).body = p.reminder.body
            life(p.reminder_id).steps.append(f"{where}: injected")
        elif isinstance(p, ev.Fired):
            life(p.reminder_id).steps.append(f"{where}: delivered at turn {p.turn_number}")
        elif isinstance(p, ev.Expired):
            life(p.reminder_id).steps.append(f"{where}: expired ({p.reason})")
        elif isinstance(p, ev.Acknowledged):
            life(p.reminder_id).steps.append(f"{where}: acknowledged as {p.outcome} by {p.by}")
        elif isinstance(p, ev.Deduped):
            for replaced in p.replaced_ids:
                life(replaced).steps.append(f"{where}: replaced by {p.reminder_id}")
        elif isinstance(p, (ev.Revoked, ev.Dropped)):
            life(p.reminder_id).steps.append(f"{where}: {event.kind}")
        elif isinstance(p, ev.Compacted):
            for kept in p.preserved_ids:
                life(kept).steps.append(f"{where}: kept through compaction")
    return list(found.values())


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
h1{font-size:1.4rem} h2{font-size:1.1rem;border-bottom:1px solid #ccc}
.turn{margin:1rem 0 2rem} .event{font-family:monospace;font-size:.85rem;margin:.1rem 0}
.kind{display:inline-block;min-width:7rem;font-weight:bold}
pre.envelope{background:#f5f5f0;border-left:4px solid #8a6;padding:.6rem;white-space:pre-wrap}
table{border-collapse:collapse} td,th{border:1px solid #ddd;padding:.3rem;text-align:left;
vertical-align:top;font-size:.85rem}
#chart figure{margin:0;overflow-x:auto} details.envelope-text{margin:.3rem 0}
details.envelope-text summary{cursor:pointer;font-size:.9rem}
details.envelope-text pre{background:#f5f5f0;border-left:4px solid #8a6;padding:.6rem;
white-space:pre-wrap;margin:.3rem 0 .8rem}
"""


def _chart_section(session_id: str, result: ReplayResult) -> list[str]:
    """The SVG chart, then each envelope's exact text one click away."""
    e = html.escape
    drawn = chart(result.events)
    parts = [
        '<section id="chart"><h2>Reminders by turn</h2>',
        f"<figure>{chart_svg(drawn, session_id, inline=True)}</figure>",
        '<div id="envelopes"><h2>Envelopes as the model received them</h2>',
    ]
    for envelope in drawn.envelopes:
        ids = ", ".join(envelope.directive_ids) or "none"
        parts.append(
            f'<details class="envelope-text" id="envelope-{envelope.session_seq}" '
            f'data-turn="{envelope.turn}" data-seq="{envelope.session_seq}"><summary>Turn '
            f"{envelope.turn} · #{envelope.session_seq} · {len(envelope.directive_ids)} "
            f"directive(s): {e(ids)} · speaker {e(envelope.speaker)} · {e(envelope.format)}"
            f"</summary><pre>{e(envelope.text)}</pre></details>"
        )
    if not drawn.envelopes:
        parts.append("<p>No envelope was delivered.</p>")
    parts.append("</div></section>")
    return parts


def html_report(session_id: str, result: ReplayResult) -> str:
    """One self-contained page: no scripts, no fetches, everything escaped."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Reminder audit: {e(session_id)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Reminder audit of session <code>{e(session_id)}</code></h1>",
        f'<p id="summary">{len(result.events)} events · session_seq '
        f"{result.state.session_seq} · state sha256 <code>{result.digest}</code></p>",
    ]
    parts.extend(_chart_section(session_id, result))
    parts.append('<section id="timeline"><h2>Trail</h2>')
    for turn, group in _by_turn(result.events):
        parts.append(f'<div class="turn" data-turn="{turn}"><h2>Turn {turn}</h2>')
        for event in group:
            parts.append(
                f'<div class="event" data-kind="{event.kind}">#{event.session_seq} '
                f'<span class="kind">{e(event.kind)}</span> {e(describe(event))}</div>'
            )
            if isinstance(event.payload, ev.Delivered):
                ids = " ".join(event.payload.directive_ids)
                parts.append(
                    f'<pre class="envelope" data-turn="{event.payload.turn_number}" '
                    f'data-directives="{e(ids)}">{e(event.payload.text)}</pre>'
                )
        trail = provider_trail(group)
        if trail is not None:
            parts.append(f'<p class="provider-trail" data-turn="{turn}">{e(trail)}</p>')
        cost = turn_tokens(group)
        if cost is not None:
            parts.append(
                f'<p class="turn-tokens" data-turn="{turn}" data-tokens="{cost}">'
                f"~{cost} tokens delivered in this turn's envelopes</p>"
            )
        parts.append("</div>")
    parts.append('</section><section id="lives"><h2>Each reminder, from injection to expiry</h2>')
    parts.append("<table><tr><th>reminder</th><th>body</th><th>life</th></tr>")
    for life in lives(result.events):
        steps = "<br>".join(e(step) for step in life.steps)
        parts.append(
            f'<tr class="life" data-reminder="{e(life.reminder_id)}"><td><code>'
            f"{e(life.reminder_id)}</code></td><td>{e(_short(life.body, 120))}</td>"
            f"<td>{steps}</td></tr>"
        )
    parts.append("</table></section></body></html>")
    return "\n".join(parts) + "\n"


def _ttl(turns: int | None) -> str:
    """A TTL as the trail shows it: `∞` for a reminder that lives until cleared."""
    return "∞" if turns is None else str(turns)
