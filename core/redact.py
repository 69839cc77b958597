"""Redaction of secrets in reminder bodies at ingest (SPEC §10), a pure rule of the core.

With `CoreConfig.redact` on, `decide` replaces every secret-looking token of a body with
`[REDACTED:<kind>]` before anything is logged, and records how many it replaced in the
event's `redactions`; the secret itself never reaches an event, a reply, the state, a log or
a metric. `replay --verify` re-checks it: a body recorded with `redactions > 0` must hold no
secret `redact` would still find, and at least that many markers.
"""

from __future__ import annotations

import re

#: Kinds and their patterns, tried as one alternation (the earliest, longest match wins at a
#: position). A token must not be glued to a preceding word character (`task-…` is no `sk-`).
_EDGE = r"(?<![A-Za-z0-9_-])"
PATTERNS: dict[str, str] = {
    "private_key": (
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
        r"[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"
    ),
    "jwt": _EDGE + r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}",
    "bearer": r"\bBearer\s+[A-Za-z0-9._~+/-]{8,}=*",
    "github_pat": _EDGE + r"github_pat_[A-Za-z0-9_]{20,}",
    "github_token": _EDGE + r"gh[pousr]_[A-Za-z0-9]{30,}",
    "aws_access_key": _EDGE + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",
    "slack_token": _EDGE + r"xox[bp]-[A-Za-z0-9-]{10,}",
    "api_key": _EDGE + r"sk-[A-Za-z0-9_-]{20,}",
}
_SECRET = re.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in PATTERNS.items()))
MARKER_PREFIX = "[REDACTED:"


def redact(text: str) -> tuple[str, int]:
    """`text` with each secret replaced by `[REDACTED:<kind>]`, and how many were."""
    count = 0

    def marker(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"{MARKER_PREFIX}{match.lastgroup}]"

    return _SECRET.sub(marker, text), count


def markers(text: str) -> int:
    """How many redaction markers `text` holds."""
    return text.count(MARKER_PREFIX)
