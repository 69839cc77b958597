"""Declarative rules (SPEC §9.3, the Limerence predicates), as providers.

`[[rules]]` entries `{id, when, reminder}` where `when` holds one or more of
`every_n_turns = N` (fires on a `user_turn` whose `turn % N == 0`), `content_pattern = REGEX`
(matches the user turn's text; the text is never stored) and `once = true` (latches per
session: the latch is a `provider_evaluated{fired: true}` of the rule already in the log,
folded into the session view and re-checked by the gateway). Every predicate given must hold.

Regexes use the `regex` package: compiled at load, and every match runs with a time bound
(`MATCH_TIMEOUT_S`), so a catastrophic pattern costs at most that per evaluation and is
recorded as `provider_error` (`pattern_timeout`) instead of stalling the service; patterns
with a nested unbounded quantifier (`(a+)+`, the classic catastrophic shape) are refused at
load. A rule's reminder is validated at load; `source` defaults to `stdlib_provider` and
`dedupe_key` to `rule:<id>` so a repeating rule replaces its previous reminder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import regex  # type: ignore[import-untyped]

from contracts.agent_events import RuntimeEvent, UserTurn
from contracts.errors import ReminderError
from contracts.spec import parse_reminder
from contracts.state import SessionState
from core.providers.builtins import ConfigProblem
from core.providers.model import PROVIDER_SOURCE, Provider, ProviderResult, fired, skipped

#: Time bound of one content_pattern match.
MATCH_TIMEOUT_S = 0.05
RULE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}]\)(?:[+*]|\{\d*,\d*\})")
_WHEN_KEYS = frozenset({"every_n_turns", "content_pattern", "once"})
_RULE_KEYS = frozenset({"id", "when", "reminder"})


def evaluate_rule(
    view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]
) -> ProviderResult:
    """All given predicates hold → fire. A `once` rule that already fired in the session is
    latched by `evaluate_event`, as every `once` provider is."""
    payload = event.payload
    assert isinstance(payload, UserTurn)
    every = config.get("every_n_turns")
    if every is not None and event.turn % int(every) != 0:
        return skipped("predicate_false")
    pattern = config.get("pattern")
    if pattern is not None:
        try:
            matched = pattern.search(payload.text, timeout=MATCH_TIMEOUT_S) is not None
        except TimeoutError:
            return ProviderResult("provider_error", error="pattern_timeout: content_pattern match")
        if not matched:
            return skipped("predicate_false")
    return fired(config["reminder"])


def compile_pattern(text: object) -> Any:
    """A content_pattern compiled with the `regex` package (raises `ConfigProblem`)."""
    if not isinstance(text, str) or not text:
        raise ConfigProblem("content_pattern must be a non-empty string")
    if _NESTED_QUANTIFIER.search(text):
        raise ConfigProblem("content_pattern has a nested unbounded quantifier (catastrophic)")
    try:
        return regex.compile(text)
    except regex.error as exc:
        raise ConfigProblem(f"content_pattern does not compile: {exc}") from None


def rule(raw: object) -> Provider:
    """A `[[rules]]` entry as a provider (raises `ConfigProblem`)."""
    if not isinstance(raw, Mapping):
        raise ConfigProblem("a rule must be a table")
    unknown = sorted(set(raw) - _RULE_KEYS)
    if unknown:
        raise ConfigProblem(f"unknown option(s): {', '.join(unknown)}")
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not RULE_ID.match(rule_id):
        raise ConfigProblem("a rule needs an id matching [A-Za-z0-9_.:-]{1,64}")
    when = raw.get("when")
    if not isinstance(when, Mapping) or not when:
        raise ConfigProblem(f"rule {rule_id}: when must name a predicate")
    unknown = sorted(set(when) - _WHEN_KEYS)
    if unknown:
        raise ConfigProblem(f"rule {rule_id}: unknown predicate(s): {', '.join(unknown)}")
    config: dict[str, Any] = {"id": rule_id}
    if "every_n_turns" in when:
        every = when["every_n_turns"]
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigProblem(f"rule {rule_id}: every_n_turns must be an integer ≥ 1")
        config["every_n_turns"] = every
    if "content_pattern" in when:
        try:
            config["pattern"] = compile_pattern(when["content_pattern"])
        except ConfigProblem as exc:
            raise ConfigProblem(f"rule {rule_id}: {exc}") from None
    once = when.get("once", False)
    if not isinstance(once, bool):
        raise ConfigProblem(f"rule {rule_id}: once must be true or false")
    if not once and len(config) == 1:
        raise ConfigProblem(f"rule {rule_id}: when must name a predicate")
    reminder = raw.get("reminder")
    if not isinstance(reminder, Mapping):
        raise ConfigProblem(f"rule {rule_id}: reminder must be a table")
    spec = {"source": PROVIDER_SOURCE, "dedupe_key": f"rule:{rule_id}", **reminder}
    try:
        parse_reminder(spec)
    except ReminderError as exc:
        raise ConfigProblem(f"rule {rule_id}: reminder: {exc.message}") from None
    config["reminder"] = spec
    return Provider(rule_id, frozenset({"user_turn"}), evaluate_rule, config, once)
