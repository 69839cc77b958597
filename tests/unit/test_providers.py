"""The pure providers (SPEC §9): every built-in of the §9.3 table, the declarative rules, the
configuration's coded errors, the plug-in entry point, and the `evaluate` decider."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from contracts.agent_events import RuntimeEvent, decode_runtime_event
from contracts.decode import DecodeError
from contracts.errors import ErrorCode
from contracts.events import Event, ProviderEvaluated
from contracts.state import SessionState
from core import CommandContext, fold_all, handle
from core.providers import (
    ProvidersConfig,
    ProvidersConfigError,
    default_config,
    evaluate_event,
    evaluation_request_id,
    parse_config,
)
from core.providers.builtins import BUILTINS
from tests.unit.plugin_support import write_plugin_dist

AT = "2026-11-29T15:04:05.123Z"


def runtime(
    kind: str, payload: dict[str, Any], turn: int = 1, event_id: str = "rt"
) -> RuntimeEvent:
    return decode_runtime_event(
        {
            "schema": "reminder-ledger.agent-event/v1",
            "event_id": event_id,
            "kind": kind,
            "session_id": "s1",
            "turn": turn,
            "occurred_at": AT,
            "payload": payload,
        }
    )


class Session:
    """A session driven through evaluate_event and the evaluate decider, folded as it goes."""

    def __init__(self, config: ProvidersConfig | None = None) -> None:
        self.config = config or default_config()
        self.state = SessionState()
        self.log: list[Event] = []
        self.n = 0

    def send(self, kind: str, payload: dict[str, Any], turn: int = 1) -> list[ProviderEvaluated]:
        self.n += 1
        event = runtime(kind, payload, turn, f"rt-{self.n}")
        return self.evaluate(event, self.state)

    def evaluate(self, event: RuntimeEvent, view: SessionState) -> list[ProviderEvaluated]:
        evaluations = evaluate_event(view, event, self.config)
        if not evaluations:
            return []
        command = {
            "session_id": "s1",
            "request_id": evaluation_request_id(event.event_id),
            "turn": event.turn,
            "runtime_event_id": event.event_id,
            "view_seq": view.session_seq,
            "evaluations": [e.model_dump(mode="json") for e in evaluations],
        }
        context = CommandContext(
            command_id=f"c-{event.event_id}", occurred_at=AT, new_reminder_id="x"
        )
        decision = handle(self.state, "evaluate", command, context)
        assert decision.ok, decision.reply
        self.state = fold_all(self.state, decision.events)
        self.log += decision.events
        return [e.payload for e in decision.events if isinstance(e.payload, ProviderEvaluated)]

    def live(self) -> list[Any]:
        return [row.spec for row in self.state.pending]


def reasons(results: list[ProviderEvaluated]) -> list[tuple[str, str]]:
    return [(r.provider_id, r.reason) for r in results]


def budget(used: int, window: int = 200_000) -> dict[str, int]:
    return {"used_tokens": used, "context_window": window}


# --- token_pressure -------------------------------------------------------------------------


def test_token_pressure_fires_once_per_threshold_crossed_upward_and_a_lower_reading_rearms() -> (
    None
):
    s = Session()
    steps = [
        (100_000, "below_threshold"),
        (140_000, "fired"),  # 0.70
        (150_000, "threshold_already_reported"),
        (171_000, "fired"),  # 0.855 ≥ 0.85
        (172_000, "threshold_already_reported"),
        (190_000, "fired"),  # 0.95
        (50_000, "below_threshold"),  # re-arms
        (141_000, "fired"),
    ]
    got = [s.send("budget", budget(used))[0].reason for used, _ in steps]
    assert got == [reason for _, reason in steps]


def test_token_pressure_reminder_matches_the_table_and_is_preserved_only_at_the_highest() -> None:
    s = Session()
    s.send("budget", budget(171_000))
    (spec,) = s.live()
    assert spec.tags == ["token_pressure"] and spec.dedupe_key == "token_pressure"
    assert spec.ttl_turns == 2 and spec.role_hint == "developer"
    assert spec.propagate == "session" and spec.source == "stdlib_provider"
    assert spec.preserve_on_compact is False
    s.send("budget", budget(195_000))
    (critical,) = s.live()  # the same dedupe key replaced the 85 % one
    assert critical.preserve_on_compact is True
    assert [e.kind for e in s.log].count("deduped") == 1


def test_token_pressure_thresholds_and_window_come_from_config() -> None:
    s = Session(
        parse_config("[config.token_pressure]\nthresholds = [0.5]\ncontext_window = 1000\n")
    )
    assert s.send("budget", budget(499, 10))[0].reason == "below_threshold"
    assert s.send("budget", budget(500, 10))[0].reason == "fired"


# --- idle_nudge, tool_output_truncated, post_compact_recap, resume_continuity -------------------


def test_idle_nudge_fires_from_sixty_seconds_by_default_and_follows_its_config() -> None:
    s = Session()
    assert s.send("session_idle", {"idle_seconds": 59})[0].reason == "below_threshold"
    assert s.send("session_idle", {"idle_seconds": 60})[0].reason == "fired"
    (spec,) = s.live()
    assert (spec.tags, spec.dedupe_key, spec.ttl_turns, spec.propagate) == (
        ["idle"],
        "idle_nudge",
        1,
        "none",
    )
    s2 = Session(parse_config("[config.idle_nudge]\nseconds = 120\n"))
    assert s2.send("session_idle", {"idle_seconds": 90})[0].reason == "below_threshold"


def test_tool_output_truncated_fires_only_when_truncated_with_a_per_tool_key() -> None:
    s = Session()
    out = s.send("tool_result", {"tool_name": "grep", "truncated": False})
    assert ("tool_output_truncated", "predicate_false") in reasons(out)
    s.send(
        "tool_result",
        {"tool_name": "grep", "truncated": True, "original_bytes": 9, "shown_bytes": 3},
    )
    (spec,) = s.live()
    assert spec.tags == ["truncation"] and spec.dedupe_key == "tool_output_truncated:grep"
    assert spec.ttl_turns == 1 and spec.propagate == "none"
    assert "showed 3 of 9 bytes" in spec.body


def test_post_compact_recap_fires_after_archiving_and_carries_the_summary() -> None:
    s = Session()
    assert s.send("post_compact", {"archived_count": 0})[0].reason == "predicate_false"
    assert s.send("post_compact", {"archived_count": 3, "summary": "Parser done."})[0].fired
    (spec,) = s.live()
    assert (spec.tags, spec.dedupe_key, spec.ttl_turns, spec.propagate) == (
        ["recap"],
        "post_compact_recap",
        2,
        "session",
    )
    assert "3 earlier messages" in spec.body and "Parser done." in spec.body


def test_resume_continuity_names_reason_cause_input_and_digest() -> None:
    s = Session()
    s.send(
        "worker_resumed",
        {
            "suspension_reason": "awaiting approval",
            "resume_cause": "approved",
            "resume_input": "go ahead",
            "pre_suspend_digest": "edited 3 files",
        },
    )
    (spec,) = s.live()
    assert spec.tags == ["resume_continuity"] and spec.dedupe_key == "resume_continuity"
    assert spec.ttl_turns == 1 and spec.preserve_on_compact and spec.propagate == "none"
    for text in ("awaiting approval", "approved", "go ahead", "edited 3 files"):
        assert text in spec.body


# --- workspace_anchor ------------------------------------------------------------------------


def test_workspace_anchor_only_when_an_anchor_is_set() -> None:
    s = Session()
    assert s.send("session_start", {})[0].reason == "predicate_false"
    assert s.send("session_start", {"workspace_anchor": "/repo", "roots": ["/repo/a"]})[0].fired
    (spec,) = s.live()
    assert (spec.tags, spec.dedupe_key, spec.ttl_turns, spec.propagate) == (
        ["workspace_anchor"],
        "workspace_anchor",
        1,
        "session",
    )
    assert "/repo" in spec.body and "/repo/a" in spec.body
    # On every budget reading it refreshes the anchor it knows (SPEC §9.3.1): a crossing or
    # not, and its dedupe key keeps exactly one anchor live.
    out = dict(reasons(s.send("budget", budget(150_000))))
    assert out == {"token_pressure": "fired", "workspace_anchor": "fired"}
    assert dict(reasons(s.send("budget", budget(151_000))))["workspace_anchor"] == "fired"
    assert dict(reasons(s.send("budget", budget(1_000))))["workspace_anchor"] == "fired"
    assert [spec.dedupe_key for spec in s.live()].count("workspace_anchor") == 1


def test_workspace_anchor_on_budget_without_any_anchor_is_predicate_false() -> None:
    s = Session()
    assert dict(reasons(s.send("budget", budget(150_000))))["workspace_anchor"] == "predicate_false"
    s2 = Session(parse_config('[config.workspace_anchor]\nanchor = "/srv/app"\n'))
    assert dict(reasons(s2.send("budget", budget(150_000))))["workspace_anchor"] == "fired"


# --- grounded_review --------------------------------------------------------------------------

PYTEST_TAIL = "\n".join(
    [
        "FAILED tests/test_a.py::test_one - assert 1 == 2",
        "FAILED tests/test_b.py::test_two - KeyError: 'x'",
        "==== 2 failed, 10 passed in 0.52s ====",
    ]
)


@pytest.mark.parametrize(
    ("tool", "exit_code", "tail", "fires"),
    [
        ("bash", 1, PYTEST_TAIL, True),
        ("pytest", 1, "", True),  # a known verifier's non-zero exit is evidence enough
        ("bash", 0, PYTEST_TAIL, False),  # a passing run never fires
        ("bash", 1, "some random failure text", False),  # no known verifier: no evidence
        ("bash", None, "I think this code could be cleaner", False),  # opinion, not evidence
        ("mypy", 1, "app.py:3: error: Name 'x' is not defined  [name-defined]", True),
        ("ruff", 1, "app.py:1:1: F401 `os` imported but unused\nFound 1 error.", True),
        ("tsc", 2, "src/a.ts(3,1): error TS2304: Cannot find name 'x'.", True),
        ("cargo check", 101, "error[E0425]: cannot find value `x`\ncould not compile", True),
        ("go test", 1, "--- FAIL: TestX (0.00s)\nFAIL\tpkg\t0.01s", True),
    ],
)
def test_grounded_review_fires_only_on_concrete_verifier_evidence(
    tool: str, exit_code: int | None, tail: str, fires: bool
) -> None:
    s = Session()
    payload: dict[str, Any] = {"tool_name": tool, "truncated": False, "output_tail": tail}
    if exit_code is not None:
        payload["exit_code"] = exit_code
    out = dict(reasons(s.send("tool_result", payload)))
    assert out["grounded_review"] == ("fired" if fires else "predicate_false")
    if fires:
        (spec,) = s.live()
        assert spec.tags == ["grounded_review", "code_review"] and spec.ttl_turns == 2
        assert spec.role_hint == "developer" and spec.propagate == "none"


def test_grounded_review_lists_at_most_max_findings_and_warnings_only_when_asked() -> None:
    tail = "\n".join(f"m.py:{n}: error: bad {n}" for n in range(8)) + "\nm.py:9: note: hint"
    s = Session(parse_config("[config.grounded_review]\nmax_findings = 2\n"))
    s.send(
        "tool_result",
        {"tool_name": "mypy", "truncated": False, "exit_code": 1, "output_tail": tail},
    )
    (spec,) = s.live()
    assert spec.body.count("\n- ") == 2 and "6 more" in spec.body and "note: hint" not in spec.body
    s2 = Session(
        parse_config("[config.grounded_review]\nmax_findings = 20\ninclude_warnings = true\n")
    )
    s2.send(
        "tool_result",
        {"tool_name": "mypy", "truncated": False, "exit_code": 1, "output_tail": tail},
    )
    assert "note: hint" in s2.live()[0].body


# --- declarative rules --------------------------------------------------------------------------


def rules_config(*rules: str, extra: str = "") -> ProvidersConfig:
    return parse_config(extra + "".join(f"[[rules]]\n{rule}\n" for rule in rules))


def test_every_n_turns_fires_when_the_turn_is_a_multiple() -> None:
    s = Session(
        rules_config(
            'id = "memo"\nwhen = { every_n_turns = 3 }\nreminder = { body = "Save notes." }'
        )
    )
    got = [s.send("user_turn", {"text": "hi"}, turn=t)[0].reason for t in range(1, 7)]
    assert got == [
        "predicate_false",
        "predicate_false",
        "fired",
        "predicate_false",
        "predicate_false",
        "fired",
    ]
    (spec,) = s.live()  # the rule's default dedupe key replaced the first one
    assert spec.dedupe_key == "rule:memo" and spec.source == "stdlib_provider"


def test_content_pattern_matches_the_text_which_is_never_stored() -> None:
    s = Session(
        rules_config(
            'id = "export"\nwhen = { content_pattern = "(?i)\\\\bexport\\\\b" }\n'
            'reminder = { body = "Exports live under Settings.", ttl_turns = 1 }'
        )
    )
    assert s.send("user_turn", {"text": "import it"})[0].reason == "predicate_false"
    assert s.send("user_turn", {"text": "How do I EXPORT my-secret-data?"})[0].fired
    assert all("my-secret-data" not in e.model_dump_json() for e in s.log)


def test_once_latches_per_session_in_the_log() -> None:
    s = Session(
        rules_config(
            'id = "intro"\nwhen = { once = true }\nreminder = { body = "Dashboards exist." }'
        )
    )
    got = [s.send("user_turn", {"text": "x"})[0].reason for _ in range(3)]
    assert got == ["fired", "once_latched", "once_latched"]
    assert s.state.providers is not None and s.state.providers.marks["intro"].fired_count == 1


def test_a_catastrophic_pattern_is_refused_at_load_and_a_slow_match_is_bounded() -> None:
    with pytest.raises(ProvidersConfigError) as refused:
        rules_config('id = "bad"\nwhen = { content_pattern = "(a+)+$" }\nreminder = { body = "b" }')
    assert refused.value.code is ErrorCode.INVALID_OPTION
    s = Session(
        rules_config(
            'id = "slow"\nwhen = { content_pattern = "(a|aa)*c" }\nreminder = { body = "b" }'
        )
    )
    (result,) = s.send("user_turn", {"text": "a" * 5000})
    assert result.reason in {"predicate_false", "provider_error"}  # never hangs
    if result.reason == "provider_error":
        assert (result.error or "").startswith("pattern_timeout")


# --- trail-wide checks: durable, budget, disabled, malformed --------------------------------------


def test_an_unchanged_durable_reminder_is_not_injected_again() -> None:
    rule = (
        'id = "law"\nwhen = { every_n_turns = 1 }\nreminder = { body = "Never push to main.", '
        'preserve_on_compact = true, dedupe_key = "law" }'
    )
    s = Session(rules_config(rule))
    assert s.send("user_turn", {"text": "a"})[0].reason == "fired"
    assert s.send("user_turn", {"text": "b"})[0].reason == "unchanged_durable_reminder"
    assert len(s.live()) == 1


def test_max_bytes_per_turn_bounds_provider_bodies_per_session_and_turn() -> None:
    s = Session(parse_config("max_bytes_per_turn = 300\n"))
    first = s.send("tool_result", {"tool_name": "a", "truncated": True}, turn=1)
    second = s.send("tool_result", {"tool_name": "b", "truncated": True}, turn=1)
    third = s.send("tool_result", {"tool_name": "c", "truncated": True}, turn=1)
    assert [
        r.reason for r in first + second + third if r.provider_id == "tool_output_truncated"
    ] == [
        "fired",
        "fired",
        "budget_exceeded",
    ]
    later = s.send("tool_result", {"tool_name": "c", "truncated": True}, turn=2)
    assert later[0].reason == "fired"  # a new turn, a new budget


def test_a_disabled_builtin_is_recorded_as_disabled() -> None:
    s = Session(parse_config('providers = ["-idle_nudge"]\n'))
    assert reasons(s.send("session_idle", {"idle_seconds": 999})) == [("idle_nudge", "disabled")]


# --- configuration --------------------------------------------------------------------------------


def test_more_than_eight_enabled_rules_and_plug_ins_is_harn_rmd_007() -> None:
    # SPEC §9.4: built-ins are not counted, so all of them run beside eight rules.
    rules = [
        f'id = "r{n}"\nwhen = {{ once = true }}\nreminder = {{ body = "b{n}" }}' for n in range(9)
    ]
    with pytest.raises(ProvidersConfigError) as refused:
        rules_config(*rules)
    assert refused.value.code is ErrorCode.TOO_MANY_PROVIDERS
    assert refused.value.details["enabled"] == [f"r{n}" for n in range(9)]
    eight = rules_config(*rules[:8])
    assert {f"r{n}" for n in range(8)} <= set(eight.enabled_ids)
    assert set(BUILTINS) <= set(eight.enabled_ids)


@pytest.mark.parametrize(
    "text",
    [
        "colour = 1\n",
        'providers = ["nope"]\n',
        "[config.token_pressure]\nthresholds = [2.0]\n",
        "[config.idle_nudge]\nminutes = 3\n",
        '[[rules]]\nid = "r"\nwhen = { sometimes = true }\nreminder = { body = "b" }\n',
        '[[rules]]\nid = "r"\nwhen = { once = true }\nreminder = { body = "" }\n',
        '[[rules]]\nid = "r"\nwhen = { content_pattern = "(" }\nreminder = { body = "b" }\n',
        "max_bytes_per_turn = 0\n",
        "not toml [",
    ],
)
def test_a_malformed_config_is_refused_with_harn_rmd_001(text: str) -> None:
    with pytest.raises(ProvidersConfigError) as refused:
        parse_config(text)
    assert refused.value.code is ErrorCode.INVALID_OPTION


# --- plug-ins through the real entry-point mechanism ---------------------------------------


@pytest.fixture
def plugin_site(tmp_path: Path) -> Any:
    site = write_plugin_dist(tmp_path / "site")
    sys.path.insert(0, str(site))
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        for name in [m for m in sys.modules if m.startswith("shout_plugin")]:
            del sys.modules[name]


def test_plugins_are_found_by_entry_point_and_their_failures_are_recorded(
    plugin_site: Path,
) -> None:
    from services.adapters.plugins import (
        ENTRY_POINT_GROUP,
        installed_plugins,
        load_providers_config,
    )

    assert ENTRY_POINT_GROUP == "reminder_ledger.providers"
    assert {"shout", "broken", "malformed"} <= set(installed_plugins())
    path = plugin_site / "providers.toml"
    path.write_text(
        'providers = ["shout", "broken", "malformed", "-idle_nudge", "-grounded_review"]\n',
        encoding="utf-8",
    )
    s = Session(load_providers_config(path))
    out = s.send("user_turn", {"text": "delete it"})
    assert reasons(out) == [
        ("shout", "fired"),
        ("broken", "provider_error"),
        ("malformed", "malformed_spec"),
    ]
    assert out[1].error == "provider raised RuntimeError"  # never the exception's message
    assert (out[2].error or "").startswith("HARN-RMD-006")
    lifecycle = s.send("worker_lifecycle", {"phase": "stopping"})
    assert [(r.provider_id, r.reason, (r.error or "")[:12]) for r in lifecycle] == [
        ("shout", "malformed_spec", "HARN-RMD-008"),
        ("broken", "provider_error", "provider rai"),
        ("malformed", "malformed_spec", "HARN-RMD-008"),
    ]


# --- the evaluate decider -------------------------------------------------------------------------


def test_the_gateway_rechecks_latches_so_a_stale_view_cannot_double_fire() -> None:
    s = Session(rules_config('id = "once"\nwhen = { once = true }\nreminder = { body = "hello" }'))
    stale = s.state
    assert s.evaluate(runtime("user_turn", {"text": "a"}, 1, "e1"), stale)[0].reason == "fired"
    # a second replica evaluated against the same (stale) view
    assert (
        s.evaluate(runtime("user_turn", {"text": "a"}, 1, "e2"), stale)[0].reason == "once_latched"
    )
    s2 = Session()
    stale = s2.state
    assert s2.evaluate(runtime("budget", budget(171_000), 1, "b1"), stale)[0].reason == "fired"
    again = s2.evaluate(runtime("budget", budget(172_000), 1, "b2"), stale)[0]
    assert again.reason == "threshold_already_reported" and not again.fired
    assert len(s2.live()) == 1


def test_a_reminder_the_rules_reject_turns_the_evaluation_into_malformed_spec() -> None:
    state = SessionState()
    command = {
        "session_id": "s1",
        "turn": 1,
        "runtime_event_id": "rt",
        "evaluations": [
            {
                "provider_id": "p",
                "event": "budget",
                "fired": True,
                "reason": "fired",
                "reminder": {"body": "x", "source": "inherited"},
            },
            {
                "provider_id": "q",
                "event": "budget",
                "fired": True,
                "reason": "fired",
                "reminder": {"body": "ok"},
            },
        ],
    }
    decision = handle(
        state,
        "evaluate",
        command,
        CommandContext(command_id="c", occurred_at=AT, new_reminder_id="n"),
    )
    assert decision.ok
    assert [e.kind for e in decision.events] == [
        "provider_evaluated",
        "injected",
        "provider_evaluated",
    ]
    first = decision.events[0].payload
    assert isinstance(first, ProviderEvaluated)
    assert (first.fired, first.reason) == (False, "malformed_spec")
    assert (first.error or "").startswith("HARN-RMD-001")
    assert decision.reply["injected_ids"] == [decision.events[1].payload.reminder_id]  # type: ignore[union-attr]
    assert decision.reply["evaluated_count"] == 2


def test_a_repeated_runtime_event_is_answered_from_the_log() -> None:
    s = Session()
    event = runtime("tool_result", {"tool_name": "t", "truncated": True}, 1, "same")
    s.evaluate(event, s.state)
    before = list(s.log)
    s.evaluate(event, s.state)
    assert s.log == before


def test_invalid_runtime_events_fail_to_decode_with_stable_codes() -> None:
    with pytest.raises(DecodeError) as bad:
        decode_runtime_event(b"nope")
    assert bad.value.code == "undecodable"
    with pytest.raises(DecodeError) as bad:
        decode_runtime_event({"schema": "reminder-ledger.agent-event/v1", "kind": "budget"})
    assert bad.value.code == "invalid_runtime_event"
    with pytest.raises(DecodeError) as bad:
        decode_runtime_event({"schema": "v9"})
    assert bad.value.code == "unknown_schema"
    good = runtime("budget", budget(1))
    with pytest.raises(DecodeError) as bad:
        decode_runtime_event(good.to_wire(), subject="agent.events.user_turn.s1")
    assert bad.value.code == "wrong_subject"
