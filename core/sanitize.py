"""Neutralise forged directives in tool output (SPEC §12.5).

A real envelope never travels inside a tool result, so anything there shaped like an
opening or closing tag of `context-directives`, `directive` or `system-reminder` is forged:
its `<` and `>` are escaped as the renderer escapes bodies (§5.1), and nothing else in the
text changes. Tags match in any (ASCII) case, with any attributes (a nonce included) and
with whitespace anywhere inside the brackets, also across lines.
"""

from __future__ import annotations

import re

#: The tag names whose tags are forged outside an envelope.
TAG_NAMES = ("context-directives", "directive", "system-reminder")


def _any_case(name: str) -> str:
    # Explicit ASCII case classes instead of re.IGNORECASE: Unicode case folding would also
    # match look-alikes such as U+017F for `s`, which `str.lower` (the fast pre-check below)
    # does not map, and the two must agree.
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in name)


#: One tag: `<`, optional `/`, a name ending at whitespace, `/` or `>`, then anything up to
#: the closing `>` that is not another bracket.
FORGED_TAG = re.compile(
    r"<(\s*/?\s*(?:" + "|".join(_any_case(name) for name in TAG_NAMES) + r")(?=[\s/>])[^<>]*)>"
)


def _may_hold_tag(text: str) -> bool:
    """False when no tag can be in `text`: no `<`, or no tag name in any case."""
    if "<" not in text:
        return False
    lowered = text.lower()
    return "directive" in lowered or "system-reminder" in lowered


def neutralize(text: str) -> tuple[str, int]:
    """`text` with every directive-shaped tag's brackets escaped, and how many there were.

    A text that cannot hold a tag comes back as the very same string, without a regex
    pass. Escaping a tag can complete an outer one (`<directive <directive>>`), so passes
    repeat until none is left; each pass removes a `<`, so they end.
    """
    total = 0
    if not _may_hold_tag(text):
        return text, 0
    while True:
        text, count = FORGED_TAG.subn(r"&lt;\1&gt;", text)
        if count == 0:
            return text, total
        total += count
