"""Mutation-testing gaps of the providers' evaluation, continued from
`test_providers_mutation_gaps.py`: the checks `evaluate_event` makes for every provider (budget,
once-latches, recorded levels, malformed reminders, bounded pattern matches, mutes) and
grounded_review's and workspace_anchor's finer points, each pinned by a test a surviving
mutant failed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from contracts.agent_events import RuntimeEvent
from contracts.events import MuteSelector
from contracts.state import ActiveMute, SessionState
from core.providers import (
    ProviderResult,
    ProvidersConfigError,
    evaluate_event,
    parse_config,
)
from core.providers.rules import MATCH_TIMEOUT_S, evaluate_rule
from tests.unit.test_providers import Session, budget, runtime
from tests.unit.test_providers_mutation_gaps import (
    run_plugin,
)

# --- the checks evaluate_event makes for every provider ------------------------------------


def three_rules(extra: str = "") -> Any:
    return parse_config(
        extra
        + 'providers = ["-idle_nudge", "-grounded_review"]\n'
        + "".join(
            f'[[rules]]\nid = "r{n}"\nwhen = {{ every_n_turns = 1 }}\n'
            f'reminder = {{ body = "{letter * 10}" }}\n'
            for n, letter in enumerate("abc")
        )
    )


def test_the_budget_adds_up_the_bodies_fired_for_one_event() -> None:
    event = runtime("user_turn", {"text": "hi"})
    out = evaluate_event(SessionState(), event, three_rules("max_bytes_per_turn = 25\n"))
    assert [(e.provider_id, e.reason) for e in out] == [
        ("r0", "fired"),
        ("r1", "fired"),
        ("r2", "budget_exceeded"),
    ]
    exact = evaluate_event(SessionState(), event, three_rules("max_bytes_per_turn = 30\n"))
    assert [e.reason for e in exact] == ["fired"] * 3  # a body that ends exactly at it fits


def test_evaluate_event_latches_a_once_provider_itself() -> None:
    s = Session(
        parse_config('[[rules]]\nid = "intro"\nwhen = { once = true }\nreminder = { body = "x" }\n')
    )
    s.send("user_turn", {"text": "a"})
    (again,) = evaluate_event(s.state, runtime("user_turn", {"text": "a"}, 1, "e2"), s.config)
    assert (again.provider_id, again.reason, again.fired, again.reminder) == (
        "intro",
        "once_latched",
        False,
        None,
    )


def test_a_refused_fired_evaluation_keeps_the_recorded_level() -> None:
    s = Session(parse_config("max_bytes_per_turn = 200\n"))
    assert s.send("budget", budget(171_000))[0].reason == "fired"
    refused = s.send("budget", budget(190_000))[0]  # the body no longer fits this turn
    assert (refused.reason, refused.level) == ("budget_exceeded", 850)


def test_an_invalid_reminder_from_a_provider_is_malformed_spec_with_the_rule_s_message() -> None:
    def bad(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return {"body": "", "colour": "red"}

    (evaluation,) = run_plugin(bad)
    assert evaluation.error == ("HARN-RMD-006 HARN-RMD-001: unknown option(s): colour")


def test_a_content_pattern_match_that_runs_out_of_time_is_a_provider_error() -> None:
    asked: list[object] = []

    class SlowPattern:
        def search(self, text: str, timeout: float) -> None:
            asked.append(timeout)
            raise TimeoutError

    config = {"id": "slow", "pattern": SlowPattern(), "reminder": {"body": "b"}}
    result = evaluate_rule(SessionState(), runtime("user_turn", {"text": "aaa"}), config)
    assert asked == [MATCH_TIMEOUT_S]
    assert result == ProviderResult(
        "provider_error", error="pattern_timeout: content_pattern match"
    )


# --- grounded_review's lines ----------------------------------------------------------------


def test_grounded_review_trims_line_ends_and_cuts_long_lines() -> None:
    long_line = "m.py:1: error: " + "x" * 400
    tail = f"{long_line}\nm.py:2: error: trailing   \n"
    s = Session()
    s.send(
        "tool_result",
        {"tool_name": "mypy", "truncated": False, "exit_code": 1, "output_tail": tail},
    )
    body = s.live()[0].body
    assert f"- {long_line[:300]}\n" in body and long_line[:301] not in body
    assert "- m.py:2: error: trailing\n" in body


def test_grounded_review_fires_on_failure_lines_without_an_exit_code() -> None:
    tail = "FAILED tests/test_a.py::test_one - assert 1 == 2\n==== 1 failed in 0.52s ===="
    s = Session()
    out = s.send("tool_result", {"tool_name": "bash", "truncated": False, "output_tail": tail})
    assert dict((e.provider_id, e.reason) for e in out)["grounded_review"] == "fired"
    assert s.live()[0].body == (
        "pytest reported failures:\n- FAILED tests/test_a.py::test_one - assert 1 == 2\n"
        "Fix these before claiming the work is done."
    )


def test_workspace_anchor_from_config_on_session_start_and_its_level_on_budget() -> None:
    s = Session(parse_config('[config.workspace_anchor]\nanchor = "/cfg"\n'))
    s.send("session_start", {})
    assert s.live()[0].body == (
        "Workspace anchor: /cfg\nKeep file paths and commands inside this workspace."
    )
    assert s.send("budget", budget(171_000))[1].reason == "fired"
    again = s.send("budget", budget(172_000))[1]  # every reading, no latch (SPEC §9.3.1)
    assert (again.provider_id, again.reason, again.level) == ("workspace_anchor", "fired", None)
    assert [spec.dedupe_key for spec in s.live()].count("workspace_anchor") == 1


def test_a_rule_with_several_unknown_options_names_them_all() -> None:
    with pytest.raises(ProvidersConfigError) as refused:
        parse_config(
            '[[rules]]\nid = "r"\nwhen = { once = true }\nreminder = { body = "b" }\n'
            "colour = 1\nshade = 2\n"
        )
    assert refused.value.message == "unknown option(s): colour, shade"


def test_grounded_review_without_exit_code_or_failure_lines_does_not_fire() -> None:
    out = Session().send(
        "tool_result", {"tool_name": "pytest", "truncated": False, "output_tail": "all good"}
    )
    assert dict((e.provider_id, e.reason) for e in out)["grounded_review"] == "predicate_false"


def test_a_muted_provider_is_recorded_muted_at_its_level_and_the_next_one_still_runs() -> None:
    s = Session()
    assert s.send("budget", budget(190_000))[0].level == 950
    mute = ActiveMute(
        mute_id="m", selector=MuteSelector(provider_id="token_pressure"), until_turn=None
    )
    view = s.state.model_copy(update={"mutes": [mute]})
    out = evaluate_event(view, runtime("budget", budget(190_000), 2, "rt-muted"), s.config)
    assert [(e.provider_id, e.fired, e.reason, e.level) for e in out] == [
        ("token_pressure", False, "muted", 950),
        ("workspace_anchor", False, "predicate_false", None),
    ]


def test_a_plug_in_s_level_or_error_of_another_type_is_recorded_as_none() -> None:
    def odd(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return ProviderResult("below_threshold", level="high", error=5)  # type: ignore[arg-type]

    (evaluation,) = run_plugin(odd)
    recorded = (evaluation.reason, evaluation.level, evaluation.error)
    assert recorded == ("below_threshold", None, None)


def test_a_refused_reminder_s_error_is_cut_at_1024_characters() -> None:
    def many(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        return {"body": "x", **{f"k{i:04d}": 1 for i in range(300)}}

    (evaluation,) = run_plugin(many)
    assert evaluation.reason == "malformed_spec"
    assert evaluation.error.startswith("HARN-RMD-006 HARN-RMD-001: unknown option(s): k0000, ")
    assert len(evaluation.error) == 1024
