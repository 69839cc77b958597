"""Envelope rendering (SPEC §5): selection, both formats, escaping, speaker, inline placement."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from contracts.spec import ReminderSpec
from contracts.state import PendingRow
from core.rules import renderable

AUTHORITY_RANK = {"contract": 3, "corrective": 2, "advisory": 1}
_KEY = re.compile(r"^[A-Za-z0-9._-]+$")
_SPOOF_MARKERS = ("<system-reminder", "</system-reminder>")

Speaker = Literal["harness", "person"]
Format = Literal["context-directives", "system-reminder"]


def escape_body(body: str) -> str:
    """`&` first, then `<` and `>` (SPEC §5.1)."""
    return body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def normalized_body(body: str) -> str:
    """Whitespace runs collapsed to one space and trimmed: the §5.2 equality of bodies."""
    return " ".join(body.split())


def select_winners(pending: Sequence[PendingRow], turn: int) -> list[PendingRow]:
    """The §5.2 winners among eligible reminders, in render order, delivered ones included.

    Eligible: `rules.renderable` (fired by `turn`, not audit-only). Among equal bodies the higher
    authority wins, a tie goes to the later injection; winners are ordered by authority,
    then injection order.
    """
    best: dict[str, tuple[int, int]] = {}
    for index, row in enumerate(pending):
        if not renderable(row, turn):
            continue
        key = normalized_body(row.spec.body)
        rank = (AUTHORITY_RANK[row.spec.authority], index)
        if key not in best or rank >= best[key]:
            best[key] = rank
    ordered = sorted(best.values(), key=lambda rank: (-rank[0], rank[1]))
    return [pending[index] for _, index in ordered]


def render_candidates(pending: Sequence[PendingRow], turn: int) -> list[PendingRow]:
    """The §5.2 winners not delivered yet, in render order: what a render at `turn` may
    issue (a delivered winner is not re-issued while it lives)."""
    return [row for row in select_winners(pending, turn) if not row.delivered]


def speaker_for(rows: Sequence[PendingRow]) -> Speaker:
    """`person` when every directive has role_hint user_block, else `harness` (§5.3)."""
    if rows and all(row.spec.role_hint == "user_block" for row in rows):
        return "person"
    return "harness"


def context_directives_text(
    rows: Sequence[PendingRow], speaker: Speaker, instructions: str, nonce: str | None
) -> str:
    """The §5.1 envelope, lines joined by newline, no trailing newline."""
    opening = f'<context-directives speaker="{speaker}"'
    opening += f' nonce="{nonce}">' if nonce is not None else ">"
    lines = [opening]
    if instructions:
        lines.append(instructions)
    for row in rows:
        ttl = f' ttl_turns="{row.ttl_remaining}"' if row.ttl_remaining is not None else ""
        lines.append(f'<directive authority="{row.spec.authority}"{ttl}>')
        lines.append(escape_body(row.spec.body))
        lines.append("</directive>")
    lines.append("</context-directives>")
    return "\n".join(lines)


def system_reminder_key(spec: ReminderSpec) -> str:
    """The dedupe key, else the first tag, else `reminder`; only `[A-Za-z0-9._-]+` (§5.4)."""
    candidate = spec.dedupe_key or (spec.tags[0] if spec.tags else "reminder")
    return candidate if _KEY.match(candidate) else "reminder"


def is_spoofing(body: str) -> bool:
    """A body that could forge a `<system-reminder>` block (§5.4)."""
    return any(marker in body for marker in _SPOOF_MARKERS)


def system_reminder_text(rows: Sequence[PendingRow]) -> str:
    """The §5.4 blocks joined by a blank line."""
    blocks = [
        f'<system-reminder key="{system_reminder_key(row.spec)}">\n'
        f"{escape_body(row.spec.body)}\n</system-reminder>"
        for row in rows
    ]
    return "\n\n".join(blocks)


def envelope_text(
    rows: Sequence[PendingRow], fmt: Format, instructions: str, nonce: str | None
) -> str:
    """The envelope of `rows` in `fmt` (§5.1 or §5.4); `system-reminder` has neither
    instructions nor a nonce."""
    if fmt == "system-reminder":
        return system_reminder_text(rows)
    return context_directives_text(rows, speaker_for(rows), instructions, nonce)


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units, what a JavaScript string slices by."""
    return len(text.encode("utf-16-le")) // 2


def inline_placement(user_text: str, envelope_text: str) -> tuple[str, list[int]]:
    """`user_text`, a blank line, the envelope; and the envelope's UTF-16 `[start, end)`."""
    prefix = user_text + "\n\n"
    start = utf16_length(prefix)
    return prefix + envelope_text, [start, start + utf16_length(envelope_text)]
