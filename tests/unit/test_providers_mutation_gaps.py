"""Tests that close gaps mutation testing found in `core/providers/` (docs/mutation-testing.md):
the exact message and field of every refused configuration (the operator's only clue, as
HARN-RMD-001 names what is wrong), the accepted boundary values, the plug-in adapter, the
evaluation order, and the bodies of the built-ins' reminders."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from contracts.agent_events import RuntimeEvent
from contracts.errors import ErrorCode
from contracts.state import SessionState
from core.providers import (
    ProviderResult,
    ProvidersConfigError,
    build_config,
    evaluate_event,
    parse_config,
    skipped,
)
from tests.unit.test_providers import Session, budget, runtime

R = "[[rules]]\n"

REFUSED: list[tuple[str, str, dict[str, Any]]] = [
    (
        "colour = 1\nshade = 2\n",
        "unknown option(s): colour, shade",
        {"unknown": ["colour", "shade"]},
    ),
    (
        'providers = "token_pressure"\n',
        "providers must be a list of provider ids",
        {"field": "providers"},
    ),
    ("providers = [1]\n", "providers must be a list of provider ids", {"field": "providers"}),
    ('providers = ["nope"]\n', "unknown provider: nope", {"field": "providers"}),
    ('providers = ["-nope"]\n', "unknown provider: nope", {"field": "providers"}),
    (
        "config = 3\n",
        "config must be a table of [config.<provider_id>] tables",
        {"field": "config"},
    ),
    ("[config.nope]\nx = 1\n", "config for an unknown provider: nope", {"field": "config"}),
    (
        "config = { token_pressure = 3 }\n",
        "config.token_pressure must be a table",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.token_pressure]\nthresholds = [2.0]\n",
        "config.token_pressure: thresholds must be numbers in (0, 1]",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.token_pressure]\nthresholds = []\n",
        "config.token_pressure: thresholds must be a non-empty list of numbers in (0, 1]",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.token_pressure]\nthresholds = 0.5\n",
        "config.token_pressure: thresholds must be a non-empty list of numbers in (0, 1]",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.token_pressure]\nthresholds = [true]\n",
        "config.token_pressure: thresholds must be numbers in (0, 1]",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.token_pressure]\nthresholds = [0]\n",
        "config.token_pressure: thresholds must be numbers in (0, 1]",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.token_pressure]\ncontext_window = 0\n",
        "config.token_pressure: context_window must be an integer ≥ 1",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.token_pressure]\ncontext_window = true\n",
        "config.token_pressure: context_window must be an integer ≥ 1",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.token_pressure]\ncontext_window = 1.5\n",
        "config.token_pressure: context_window must be an integer ≥ 1",
        {"field": "config.token_pressure"},
    ),
    (
        "[config.idle_nudge]\nminutes = 3\nhours = 1\n",
        "config.idle_nudge: unknown option(s): hours, minutes",
        {"field": "config.idle_nudge"},
    ),
    (
        "[config.idle_nudge]\nidle_seconds = 0\n",
        "config.idle_nudge: idle_seconds must be an integer ≥ 1",
        {"field": "config.idle_nudge"},
    ),
    (
        "[config.idle_nudge]\nseconds = 0\n",
        "config.idle_nudge: idle_seconds must be an integer ≥ 1",
        {"field": "config.idle_nudge"},
    ),
    (
        '[config.workspace_anchor]\nanchor = " "\n',
        "config.workspace_anchor: anchor must be a non-empty string",
        {"field": "config.workspace_anchor"},
    ),
    (
        "[config.workspace_anchor]\nanchor = 3\n",
        "config.workspace_anchor: anchor must be a non-empty string",
        {"field": "config.workspace_anchor"},
    ),
    (
        "[config.grounded_review]\ninclude_warnings = 1\n",
        "config.grounded_review: include_warnings must be true or false",
        {"field": "config.grounded_review"},
    ),
    (
        "[config.grounded_review]\nmax_findings = 0\n",
        "config.grounded_review: max_findings must be an integer ≥ 1",
        {"field": "config.grounded_review"},
    ),
    ("rules = 3\n", "rules must be an array of tables ([[rules]])", {"field": "rules"}),
    ("rules = [3]\n", "a rule must be a table", {"field": "rules"}),
    (
        R + 'id = "r"\nwhen = { once = true }\nreminder = { body = "b" }\ncolour = 1\n',
        "unknown option(s): colour",
        {"field": "rules"},
    ),
    (
        R + 'id = "bad id"\nwhen = { once = true }\nreminder = { body = "b" }\n',
        "a rule needs an id matching [A-Za-z0-9_.:-]{1,64}",
        {"field": "rules"},
    ),
    (
        R + 'id = 3\nwhen = { once = true }\nreminder = { body = "b" }\n',
        "a rule needs an id matching [A-Za-z0-9_.:-]{1,64}",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = 3\nreminder = { body = "b" }\n',
        "rule r: when must name a predicate",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = {}\nreminder = { body = "b" }\n',
        "rule r: when must name a predicate",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { sometimes = true, often = 1 }\nreminder = { body = "b" }\n',
        "rule r: unknown predicate(s): often, sometimes",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { every_n_turns = 0 }\nreminder = { body = "b" }\n',
        "rule r: every_n_turns must be an integer ≥ 1",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { every_n_turns = true }\nreminder = { body = "b" }\n',
        "rule r: every_n_turns must be an integer ≥ 1",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { every_n_turns = "2" }\nreminder = { body = "b" }\n',
        "rule r: every_n_turns must be an integer ≥ 1",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { content_pattern = "(" }\nreminder = { body = "b" }\n',
        "rule r: content_pattern does not compile: missing ) at position 1",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { content_pattern = "" }\nreminder = { body = "b" }\n',
        "rule r: content_pattern must be a non-empty string",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { content_pattern = 3 }\nreminder = { body = "b" }\n',
        "rule r: content_pattern must be a non-empty string",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { content_pattern = "(a+)+" }\nreminder = { body = "b" }\n',
        "rule r: content_pattern has a nested unbounded quantifier (catastrophic)",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { once = "yes" }\nreminder = { body = "b" }\n',
        "rule r: once must be true or false",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { once = false }\nreminder = { body = "b" }\n',
        "rule r: when must name a predicate",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { once = true }\nreminder = 3\n',
        "rule r: reminder must be a table",
        {"field": "rules"},
    ),
    (
        R + 'id = "r"\nwhen = { once = true }\nreminder = { body = "" }\n',
        "rule r: reminder: invalid body: body must not be empty",
        {"field": "rules"},
    ),
    (
        R
        + 'id = "r"\nwhen = { once = true }\nreminder = { body = "b" }\n'
        + R
        + 'id = "r"\nwhen = { once = true }\nreminder = { body = "c" }\n',
        "duplicate provider or rule id: r",
        {"field": "rules"},
    ),
    (
        R + 'id = "token_pressure"\nwhen = { once = true }\nreminder = { body = "b" }\n',
        "duplicate provider or rule id: token_pressure",
        {"field": "rules"},
    ),
    (
        "max_bytes_per_turn = 0\n",
        "max_bytes_per_turn must be an integer ≥ 1",
        {"field": "max_bytes_per_turn"},
    ),
    (
        "max_bytes_per_turn = true\n",
        "max_bytes_per_turn must be an integer ≥ 1",
        {"field": "max_bytes_per_turn"},
    ),
    (
        "max_bytes_per_turn = 1.5\n",
        "max_bytes_per_turn must be an integer ≥ 1",
        {"field": "max_bytes_per_turn"},
    ),
]


@pytest.mark.parametrize(("text", "message", "details"), REFUSED)
def test_a_refused_config_names_what_is_wrong_and_where(
    text: str, message: str, details: dict[str, Any]
) -> None:
    with pytest.raises(ProvidersConfigError) as refused:
        parse_config(text)
    assert refused.value.code is ErrorCode.INVALID_OPTION
    assert (refused.value.message, refused.value.details) == (message, details)


def test_text_that_is_not_toml_is_refused_with_the_parser_s_reason() -> None:
    with pytest.raises(ProvidersConfigError) as refused:
        parse_config("not toml [")
    assert refused.value.code is ErrorCode.INVALID_OPTION
    assert refused.value.message.startswith("the providers config is not valid TOML: Expected")


def test_the_smallest_accepted_values_are_accepted() -> None:
    config = parse_config(
        "max_bytes_per_turn = 1\n"
        "[config.token_pressure]\ncontext_window = 1\nthresholds = [1]\n"
        "[config.idle_nudge]\nseconds = 1\n"
        "[config.grounded_review]\nmax_findings = 1\n"
        '[config.workspace_anchor]\nanchor = "/w"\n'
        '[[rules]]\nid = "r"\nwhen = { every_n_turns = 1 }\nreminder = { body = "b" }\n'
    )
    by_id = {provider.id: provider.config for provider in config.order}
    assert config.max_bytes_per_turn == 1
    assert by_id["token_pressure"] == {"context_window": 1, "thresholds": [1000]}
    assert by_id["idle_nudge"] == {
        "idle_seconds": 1
    }  # `seconds` is read when `idle_seconds` is not
    assert by_id["grounded_review"] == {"max_findings": 1, "include_warnings": False}
    assert by_id["workspace_anchor"] == {"anchor": "/w"}
    assert parse_config("[config.idle_nudge]\nidle_seconds = 5\nseconds = 9\n").order[1].config == {
        "idle_seconds": 5
    }


def test_the_defaults_of_the_built_ins() -> None:
    by_id = {provider.id: provider.config for provider in parse_config("").order}
    assert by_id["idle_nudge"] == {"idle_seconds": 60}
    assert by_id["grounded_review"] == {"max_findings": 5, "include_warnings": False}
    assert by_id["token_pressure"] == {"context_window": None, "thresholds": [700, 850, 950]}


def test_only_a_built_in_can_be_disabled() -> None:
    def plugin(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return None

    with pytest.raises(ProvidersConfigError) as refused:
        build_config({"providers": ["-mine"]}, {"mine": plugin})
    assert (refused.value.message, refused.value.details) == (
        "only a built-in can be disabled: mine",
        {"field": "providers"},
    )


def test_too_many_providers_names_them_and_the_limit() -> None:
    # SPEC §9.4: rules and plug-ins count, built-ins do not.
    rules = "".join(
        f'[[rules]]\nid = "r{n}"\nwhen = {{ once = true }}\nreminder = {{ body = "b" }}\n'
        for n in range(9)
    )
    with pytest.raises(ProvidersConfigError) as refused:
        parse_config(rules)
    assert refused.value.details == {"enabled": [f"r{n}" for n in range(9)], "limit": 8}
    assert refused.value.message == "9 distinct rules and plug-ins are enabled; at most 8"


# --- the plug-in adapter --------------------------------------------------------------------


def run_plugin(fn: Any, kind: str = "session_idle", view: SessionState | None = None) -> Any:
    config = build_config({"providers": ["mine"], "config": {"mine": {"word": "hi"}}}, {"mine": fn})
    payloads = {"session_idle": {"idle_seconds": 1}, "budget": budget(1)}
    event = runtime(kind, payloads[kind])
    return [
        e for e in evaluate_event(view or SessionState(), event, config) if e.provider_id == "mine"
    ]


def test_a_plug_in_sees_the_view_the_event_and_its_own_config() -> None:
    seen: list[Any] = []

    def plugin(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        seen.append((view.session_id, event.kind, dict(config)))
        return {"body": "hello"}

    view = SessionState(session_id="s1")
    (evaluation,) = run_plugin(plugin, view=view)
    assert seen == [("s1", "session_idle", {"word": "hi"})]
    # A plug-in's reminder gets the provider defaults (SPEC §9.3.1): source and fire turn.
    assert (evaluation.fired, evaluation.reminder) == (
        True,
        {"source": "stdlib_provider", "fired_at_turn": 1, "body": "hello"},
    )


def test_a_plug_in_subscribes_to_what_it_names_or_else_to_every_kind() -> None:
    def every(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return None

    def only_budget(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return None

    only_budget.subscribes = ["budget"]  # type: ignore[attr-defined]
    assert [e.reason for e in run_plugin(every)] == ["predicate_false"]
    assert run_plugin(only_budget) == []
    assert [e.reason for e in run_plugin(only_budget, "budget")] == ["predicate_false"]


def test_a_plug_in_may_answer_with_a_provider_result_or_latch_once() -> None:
    def verdict(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return ProviderResult("below_threshold", level=3)

    def latched(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return skipped("predicate_false")

    latched.once = True  # type: ignore[attr-defined]
    (evaluation,) = run_plugin(verdict)
    assert (evaluation.reason, evaluation.level, evaluation.once) == ("below_threshold", 3, False)
    assert run_plugin(latched)[0].once is True


def test_a_plug_in_answer_of_another_type_is_malformed_spec_naming_the_type() -> None:
    def wrong(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return ["body"]

    (evaluation,) = run_plugin(wrong)
    assert (evaluation.reason, evaluation.error) == (
        "malformed_spec",
        "HARN-RMD-006 provider returned a list, not a spec",
    )


# --- evaluation order and latches --------------------------------------------------------------


def test_a_disabled_built_in_keeps_its_place_in_the_evaluation_order() -> None:
    config = parse_config(
        'providers = ["-token_pressure"]\n[config.workspace_anchor]\nanchor = "/w"\n'
        '[[rules]]\nid = "a"\nwhen = { once = true }\nreminder = { body = "a" }\n'
        '[[rules]]\nid = "b"\nwhen = { once = true }\nreminder = { body = "b" }\n'
    )
    order = [provider.id for provider in config.order]
    assert order[0] == "token_pressure" and order[-2:] == ["a", "b"]
    out = evaluate_event(SessionState(), runtime("budget", budget(1)), config)
    # The anchor fires on every budget reading while it is set (SPEC §9.3.1).
    assert [(e.provider_id, e.reason) for e in out] == [
        ("token_pressure", "disabled"),
        ("workspace_anchor", "fired"),
    ]


def test_a_threshold_stays_reported_while_the_readings_stay_at_its_level() -> None:
    s = Session()
    assert s.send("budget", budget(171_000))[0].reason == "fired"
    again = [s.send("budget", budget(used))[0] for used in (172_000, 173_000)]
    assert [(e.reason, e.level) for e in again] == [("threshold_already_reported", 850)] * 2
    below = s.send("budget", budget(1_000))[0]
    assert (below.reason, below.level) == ("below_threshold", None)


# --- the bodies of the built-ins' reminders (what the model reads) -----------------------------


@pytest.mark.parametrize(
    ("kind", "payload", "body"),
    [
        (
            "budget",
            budget(171_000),
            "Context window 85% full (171000 of 200000 tokens, past the 85% mark). "
            "Be concise and prefer finishing the current step over starting new ones.",
        ),
        (
            "budget",
            budget(190_000),
            "Context window 95% full (190000 of 200000 tokens, past the 95% mark). "
            "Critical: summarise your progress now and keep remaining work small.",
        ),
        (
            "session_idle",
            {"idle_seconds": 75},
            "The session has been idle for 75 seconds. "
            "Check whether you are waiting on something, and say so or carry on.",
        ),
        (
            "tool_result",
            {"tool_name": "grep", "truncated": True, "original_bytes": 9000, "shown_bytes": 4000},
            "The output of grep was truncated (showed 4000 of 9000 bytes). Do not assume you saw "
            "all of it: narrow the command or read the rest before relying on it.",
        ),
        (
            "tool_result",
            {"tool_name": "grep", "truncated": True},
            "The output of grep was truncated. Do not assume you saw all of it: narrow the "
            "command or read the rest before relying on it.",
        ),
        (
            "post_compact",
            {"archived_count": 1, "summary": "Parser done."},
            "The transcript was compacted: 1 earlier messages were archived and are no longer "
            "visible.\nSummary of what was archived:\nParser done.",
        ),
        (
            "worker_resumed",
            {
                "suspension_reason": "awaiting approval",
                "resume_cause": "approved",
                "resume_input": "go ahead",
                "pre_suspend_digest": "edited 3 files",
            },
            "You are resuming after a suspension.\nSuspension reason: awaiting approval\n"
            "Resume cause: approved\nResume input: go ahead\nBefore suspending: edited 3 files",
        ),
        ("worker_resumed", {}, "You are resuming after a suspension."),
        (
            "tool_result",
            {"tool_name": "pytest", "truncated": False, "exit_code": 1, "output_tail": ""},
            "pytest reported failures (exit code 1).\nFix these before claiming the work is done.",
        ),
    ],
)
def test_the_reminder_body_of_each_built_in(kind: str, payload: dict[str, Any], body: str) -> None:
    s = Session()
    s.send(kind, payload)
    assert [spec.body for spec in s.live()] == [body]


def test_grounded_review_lists_failures_then_warnings_when_asked() -> None:
    tail = "\n".join(f"m.py:{n}: error: bad {n}" for n in range(3)) + "\nm.py:9: note: hint"
    config = "[config.grounded_review]\nmax_findings = 4\ninclude_warnings = true\n"
    s = Session(parse_config(config))
    s.send(
        "tool_result",
        {"tool_name": "mypy", "truncated": False, "exit_code": 1, "output_tail": tail},
    )
    assert [spec.body for spec in s.live()] == [
        "mypy reported failures (exit code 1):\n- m.py:0: error: bad 0\n- m.py:1: error: bad 1"
        "\n- m.py:2: error: bad 2\n- m.py:9: note: hint"
        "\nFix these before claiming the work is done."
    ]


def test_post_compact_recap_needs_at_least_one_archived_message() -> None:
    s = Session()
    assert s.send("post_compact", {"archived_count": 0})[0].reason == "predicate_false"
    assert s.send("post_compact", {"archived_count": 1})[0].reason == "fired"


def test_a_lower_reading_records_its_lower_level_and_re_arms_the_higher_threshold() -> None:
    s = Session()
    assert s.send("budget", budget(190_000))[0].reason == "fired"
    lower = s.send("budget", budget(171_000))[0]
    assert (lower.reason, lower.level) == ("threshold_already_reported", 850)
    assert (s.send("budget", budget(190_000))[0].reason) == "fired"


def test_a_threshold_is_crossed_at_exactly_its_share_of_the_window() -> None:
    s = Session()
    assert s.send("budget", budget(139_999))[0].reason == "below_threshold"
    assert s.send("budget", budget(140_000))[0].reason == "fired"


def test_truncation_sizes_are_shown_only_when_both_are_known() -> None:
    s = Session()
    s.send("tool_result", {"tool_name": "grep", "truncated": True, "original_bytes": 9000})
    (spec,) = s.live()
    assert spec.body.startswith("The output of grep was truncated. Do not assume")


def test_workspace_anchor_on_budget_repeats_the_anchor_line_of_the_live_reminder() -> None:
    s = Session()
    s.send("session_start", {"workspace_anchor": "/w", "roots": ["/w/a", "/w/b"]})
    assert [spec.body for spec in s.live()] == [
        "Workspace anchor: /w\nMounted roots: /w/a, /w/b\n"
        "Keep file paths and commands inside this workspace."
    ]
    out = s.send("budget", budget(171_000))
    # The anchor keeps no threshold latch: it fires on every reading (SPEC §9.3.1).
    assert [(e.provider_id, e.reason, e.level) for e in out] == [
        ("token_pressure", "fired", 850),
        ("workspace_anchor", "fired", None),
    ]
    assert s.live()[-1].body == (
        "Workspace anchor: /w\nKeep file paths and commands inside this workspace."
    )


def test_workspace_anchor_on_budget_uses_the_configured_anchor() -> None:
    s = Session(parse_config('[config.workspace_anchor]\nanchor = "/cfg"\n'))
    s.send("budget", budget(171_000))
    assert s.live()[-1].body == (
        "Workspace anchor: /cfg\nKeep file paths and commands inside this workspace."
    )
