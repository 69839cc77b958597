"""The seven built-in providers of SPEC §9.3, as pure functions.

Ids, subscriptions, tags, dedupe keys, TTLs, propagation and thresholds follow the §9.3
table (taken from the reference runtime's canonical providers). Choices where the table is
silent, written down here:

- `token_pressure` levels are per mille (0.85 → 850): events hold no floats. The level
  recorded on every evaluation is the highest threshold at or below the reading (null below
  the lowest), so a threshold fires once per upward crossing, a higher one fires again, and a
  lower reading records a lower level and so re-arms the ones above it. `context_window`
  in the config, when set, overrides the event's.
- `idle_nudge` fires when `idle_seconds` ≥ the configured threshold (key `idle_seconds`, or
  `seconds` as the reference runtime also accepts).
- `post_compact_recap` fires when compaction archived at least one message.
- `workspace_anchor` on `session_start` fires when the event names an anchor; on every
  `budget` reading it fires while an anchor is known (SPEC §9.3.1): `[config.workspace_anchor]
  anchor`, else the anchor of a live workspace_anchor reminder; its dedupe key replaces the
  previous one, so one stays live. Otherwise `predicate_false`.
- `grounded_review` fires only on concrete verifier evidence: a known verifier (pytest,
  cargo check, go test, tsc, mypy, ruff) recognised in `tool_name` or `output_tail`, with a
  non-zero `exit_code` or failure lines in the tail; an exit code of 0 never fires. Its body
  lists up to `max_findings` failure lines (warnings only with `include_warnings`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from contracts.agent_events import (
    Budget,
    PostCompact,
    RuntimeEvent,
    SessionIdle,
    SessionStart,
    ToolResult,
    WorkerResumed,
)
from contracts.state import SessionState
from core.providers.model import (
    PROVIDER_SOURCE,
    Provider,
    ProviderFn,
    ProviderResult,
    fired,
    skipped,
)
from core.rules import live_with_key, provider_mark, threshold_reported

DEFAULT_THRESHOLDS = (0.70, 0.85, 0.95)


class ConfigProblem(ValueError):
    """A provider's `[config.<id>]` table is malformed (the loader adds the code)."""


def _reading_level(used: int, window: int, thresholds: list[int]) -> int | None:
    """The highest threshold (per mille) at or below `used / window`, else None."""
    crossed = [t for t in thresholds if used * 1000 >= t * window]
    return max(crossed) if crossed else None


def _percent(used: int, window: int) -> int:
    return (used * 100) // window


def token_pressure(
    view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]
) -> ProviderResult:
    """Context budget pressure: once per threshold crossed upward."""
    payload = event.payload
    assert isinstance(payload, Budget)
    window = int(config.get("context_window") or payload.context_window)
    thresholds: list[int] = list(config["thresholds"])
    level = _reading_level(payload.used_tokens, window, thresholds)
    if level is None:
        return skipped("below_threshold", None)
    recorded = provider_mark(view.providers, "token_pressure").level
    if threshold_reported(recorded, level):
        return skipped("threshold_already_reported", level)
    critical = level == max(thresholds)
    body = (
        f"Context window {_percent(payload.used_tokens, window)}% full "
        f"({payload.used_tokens} of {window} tokens, past the {level / 10:g}% mark). "
        + (
            "Critical: summarise your progress now and keep remaining work small."
            if critical
            else "Be concise and prefer finishing the current step over starting new ones."
        )
    )
    return fired(
        {
            "body": body,
            "tags": ["token_pressure"],
            "dedupe_key": "token_pressure",
            "ttl_turns": 2,
            "role_hint": "developer",
            "propagate": "session",
            "source": PROVIDER_SOURCE,
            "preserve_on_compact": critical,
        },
        level,
    )


def idle_nudge(
    view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]
) -> ProviderResult:
    """The session has been idle at least `idle_seconds`."""
    payload = event.payload
    assert isinstance(payload, SessionIdle)
    threshold = int(config["idle_seconds"])
    if payload.idle_seconds < threshold:
        return skipped("below_threshold")
    return fired(
        {
            "body": f"The session has been idle for {payload.idle_seconds} seconds. "
            "Check whether you are waiting on something, and say so or carry on.",
            "tags": ["idle"],
            "dedupe_key": "idle_nudge",
            "ttl_turns": 1,
            "propagate": "none",
            "source": PROVIDER_SOURCE,
        }
    )


def tool_output_truncated(
    view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]
) -> ProviderResult:
    """A tool's output was cut before the model saw it."""
    payload = event.payload
    assert isinstance(payload, ToolResult)
    if not payload.truncated:
        return skipped("predicate_false")
    sizes = ""
    if payload.original_bytes is not None and payload.shown_bytes is not None:
        sizes = f" (showed {payload.shown_bytes} of {payload.original_bytes} bytes)"
    return fired(
        {
            "body": f"The output of {payload.tool_name} was truncated{sizes}. Do not assume "
            "you saw all of it: narrow the command or read the rest before relying on it.",
            "tags": ["truncation"],
            "dedupe_key": f"tool_output_truncated:{payload.tool_name}",
            "ttl_turns": 1,
            "propagate": "none",
            "source": PROVIDER_SOURCE,
        }
    )


def post_compact_recap(
    view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]
) -> ProviderResult:
    """After compaction archived messages: what was lost and the summary."""
    payload = event.payload
    assert isinstance(payload, PostCompact)
    if payload.archived_count < 1:
        return skipped("predicate_false")
    body = (
        f"The transcript was compacted: {payload.archived_count} earlier messages were "
        "archived and are no longer visible."
    )
    if payload.summary:
        body += f"\nSummary of what was archived:\n{payload.summary}"
    return fired(
        {
            "body": body,
            "tags": ["recap"],
            "dedupe_key": "post_compact_recap",
            "ttl_turns": 2,
            "propagate": "session",
            "source": PROVIDER_SOURCE,
        }
    )


def resume_continuity(
    view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]
) -> ProviderResult:
    """A worker resumed: why it stopped, what resumed it, with what, and the digest."""
    payload = event.payload
    assert isinstance(payload, WorkerResumed)
    lines = ["You are resuming after a suspension."]
    if payload.suspended_at_turn is not None:
        lines.append(f"Suspended at turn: {payload.suspended_at_turn}")
    for label, value in (
        ("Suspension reason", payload.suspension_reason),
        ("Resume cause", payload.resume_cause),
        ("Resume input", payload.resume_input),
        ("Before suspending", payload.pre_suspend_digest),
    ):
        if value:
            lines.append(f"{label}: {value}")
    return fired(
        {
            "body": "\n".join(lines),
            "tags": ["resume_continuity"],
            "dedupe_key": "resume_continuity",
            "ttl_turns": 1,
            "preserve_on_compact": True,
            "propagate": "none",
            "source": PROVIDER_SOURCE,
        }
    )


def _known_anchor(view: SessionState, config: Mapping[str, Any]) -> str | None:
    if config.get("anchor"):
        return str(config["anchor"])
    live = live_with_key(view.pending, "workspace_anchor")
    if not live:
        return None
    return live[-1].spec.body.splitlines()[0].removeprefix("Workspace anchor: ")


def workspace_anchor(
    view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]
) -> ProviderResult:
    """The session's workspace anchor and mounted roots, when one is set: on session start,
    and again on every budget reading while it is known (SPEC §9.3.1)."""
    payload = event.payload
    roots: list[str] = []
    if isinstance(payload, SessionStart):
        anchor = payload.workspace_anchor or config.get("anchor")
        roots = list(payload.roots or [])
    else:
        assert isinstance(payload, Budget)
        anchor = _known_anchor(view, config)
    if not anchor:
        return skipped("predicate_false")
    body = f"Workspace anchor: {anchor}"
    if roots:
        body += "\nMounted roots: " + ", ".join(roots)
    body += "\nKeep file paths and commands inside this workspace."
    return fired(
        {
            "body": body,
            "tags": ["workspace_anchor"],
            "dedupe_key": "workspace_anchor",
            "ttl_turns": 1,
            "propagate": "session",
            "source": PROVIDER_SOURCE,
        }
    )


#: Known verifiers: how to recognise each in a tool name or output, and its failure lines.
VERIFIERS: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = (
    (
        "pytest",
        re.compile(r"\bpytest\b|short test summary info|=+ .*\b(failed|error)s?\b.* in [\d.]+s"),
        re.compile(r"^(FAILED|ERROR) \S+|^E +\S"),
    ),
    (
        "cargo check",
        re.compile(r"\bcargo (check|build|test)\b|could not compile|^error\[E\d+\]", re.M),
        re.compile(r"^error(\[E\d+\])?: "),
    ),
    (
        "go test",
        re.compile(r"\bgo (test|vet|build)\b|^--- FAIL: |^FAIL\t", re.M),
        re.compile(r"^--- FAIL: |^FAIL\t|^\S+\.go:\d+:\d*:? "),
    ),
    (
        "tsc",
        re.compile(r"\btsc\b|error TS\d+"),
        re.compile(r"error TS\d+"),
    ),
    (
        "mypy",
        re.compile(r"\bmypy\b|^Found \d+ errors? in \d+ files?", re.M),
        re.compile(r"^\S+:\d+: error: "),
    ),
    (
        "ruff",
        re.compile(r"\bruff\b|^Found \d+ errors?\.", re.M),
        re.compile(r"^\S+:\d+:\d+: [A-Z]+\d+ "),
    ),
)
_WARNING_LINE = re.compile(r"^\S+:\d+(:\d+)?: (warning|note): |^warning(\[\w+\])?: ")


def _verifier_of(tool_name: str, tail: str) -> tuple[str, re.Pattern[str]] | None:
    for name, signature, failures in VERIFIERS:
        if signature.search(tool_name) or signature.search(tail):
            return name, failures
    return None


def grounded_review(
    view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]
) -> ProviderResult:
    """Concrete verifier failures in a tool result, never an opinion."""
    payload = event.payload
    assert isinstance(payload, ToolResult)
    tail = payload.output_tail or ""
    verifier = _verifier_of(payload.tool_name, tail)
    if verifier is None or payload.exit_code == 0:
        return skipped("predicate_false")
    name, failures = verifier
    lines = [line.rstrip() for line in tail.splitlines()]
    findings = [line for line in lines if failures.search(line)]
    if config.get("include_warnings"):
        findings += [line for line in lines if _WARNING_LINE.search(line)]
    if not findings and not payload.exit_code:
        return skipped("predicate_false")
    limit = int(config["max_findings"])
    shown = [line[:300] for line in findings[:limit]]
    head = f"{name} reported failures"
    if payload.exit_code:
        head += f" (exit code {payload.exit_code})"
    body = head + ":" if shown else head + "."
    if shown:
        body += "\n" + "\n".join(f"- {line}" for line in shown)
    if len(findings) > limit:
        body += f"\n… and {len(findings) - limit} more."
    body += "\nFix these before claiming the work is done."
    return fired(
        {
            "body": body,
            "tags": ["grounded_review", "code_review"],
            "ttl_turns": 2,
            "role_hint": "developer",
            "propagate": "none",
            "source": PROVIDER_SOURCE,
        }
    )


def _thresholds(value: object) -> list[int]:
    if not isinstance(value, list) or not value:
        raise ConfigProblem("thresholds must be a non-empty list of numbers in (0, 1]")
    levels = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | float) or not 0 < item <= 1:
            raise ConfigProblem("thresholds must be numbers in (0, 1]")
        levels.append(round(float(item) * 1000))
    return sorted(set(levels))


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigProblem(f"{name} must be an integer ≥ 1")
    return value


def _token_pressure_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    window = raw.get("context_window")
    return {
        "context_window": None if window is None else _positive_int("context_window", window),
        "thresholds": _thresholds(raw.get("thresholds", list(DEFAULT_THRESHOLDS))),
    }


def _idle_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    seconds = raw.get("idle_seconds", raw.get("seconds", 60))
    return {"idle_seconds": _positive_int("idle_seconds", seconds)}


def _anchor_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    anchor = raw.get("anchor")
    if anchor is not None and (not isinstance(anchor, str) or not anchor.strip()):
        raise ConfigProblem("anchor must be a non-empty string")
    return {"anchor": anchor}


def _review_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    include = raw.get("include_warnings", False)
    if not isinstance(include, bool):
        raise ConfigProblem("include_warnings must be true or false")
    return {
        "max_findings": _positive_int("max_findings", raw.get("max_findings", 5)),
        "include_warnings": include,
    }


def _no_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {}


#: id → (subscribed kinds, pure function, config validator, allowed config keys).
BUILTINS: dict[str, tuple[frozenset[str], ProviderFn, Any, frozenset[str]]] = {
    "token_pressure": (
        frozenset({"budget"}),
        token_pressure,
        _token_pressure_config,
        frozenset({"context_window", "thresholds"}),
    ),
    "idle_nudge": (
        frozenset({"session_idle"}),
        idle_nudge,
        _idle_config,
        frozenset({"idle_seconds", "seconds"}),
    ),
    "tool_output_truncated": (
        frozenset({"tool_result"}),
        tool_output_truncated,
        _no_config,
        frozenset(),
    ),
    "post_compact_recap": (
        frozenset({"post_compact"}),
        post_compact_recap,
        _no_config,
        frozenset(),
    ),
    "resume_continuity": (
        frozenset({"worker_resumed"}),
        resume_continuity,
        _no_config,
        frozenset(),
    ),
    "workspace_anchor": (
        frozenset({"session_start", "budget"}),
        workspace_anchor,
        _anchor_config,
        frozenset({"anchor"}),
    ),
    "grounded_review": (
        frozenset({"tool_result"}),
        grounded_review,
        _review_config,
        frozenset({"max_findings", "include_warnings"}),
    ),
}


def builtin(provider_id: str, raw_config: Mapping[str, Any] | None = None) -> Provider:
    """A built-in provider with its config validated (raises `ConfigProblem`)."""
    subscribes, fn, validate, allowed = BUILTINS[provider_id]
    raw = dict(raw_config or {})
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigProblem(f"unknown option(s): {', '.join(unknown)}")
    return Provider(provider_id, subscribes, fn, validate(raw))
