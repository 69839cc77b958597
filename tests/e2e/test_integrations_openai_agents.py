"""The OpenAI Agents SDK with `ReminderRun` against a real `reminders up`: a two-turn agent with
one tool call, driven by the SDK's own `ScriptedModel` (no network)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool
from agents.memory import SQLiteSession
from agents.testing.model import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

from client.integrations.openai_agents import ReminderOptions, ReminderRun
from tests.e2e.integration_stack import Stack, dead_nats_url, inject, wait_for_counters

BODY = "Run the tests before you answer."


@function_tool
def run_tests() -> str:
    """Run the test suite."""
    return "===== 3 passed in 0.01s ====="


def scripted_model() -> ScriptedModel:
    """Turn 1: call `run_tests`, then answer; turn 2: answer at once."""
    usage = Usage(requests=1, input_tokens=900, output_tokens=10, total_tokens=910)
    return ScriptedModel(
        [
            ModelStep(output=[function_call("run_tests", {}, call_id="call-1")], usage=usage),
            ModelStep(output=[assistant_message("tests pass")], usage=usage),
            ModelStep(output=[assistant_message("done")], usage=usage),
        ]
    )


def user_texts(items: Any) -> list[str]:
    return [
        str(item.get("content"))
        for item in items
        if isinstance(item, dict) and item.get("role") == "user"
    ]


async def two_turns(reminders: ReminderRun, model: ScriptedModel, session: Any) -> list[Any]:
    agent = Agent(name="coder", model=model, tools=[run_tests])
    outputs = []
    for prompt in ("Fix the bug.", "Anything else?"):
        result = await Runner.run(
            agent,
            prompt,
            session=session,
            run_config=reminders.run_config(tracing_disabled=True),  # no trace export
            hooks=reminders.hooks,
        )
        outputs.append(result.final_output)
    return outputs


async def test_the_model_gets_the_envelope_and_the_log_has_every_step(
    ledger_stack: Stack,
) -> None:
    sdk_session = SQLiteSession(f"agents-{uuid.uuid4().hex[:8]}")  # the session id comes from here
    await inject(ledger_stack.url, sdk_session.session_id, BODY, ttl_turns=2)
    model = scripted_model()
    reminders = ReminderRun(
        ReminderOptions(nats_url=ledger_stack.url, context_window=1000), session=sdk_session
    )

    outputs = await two_turns(reminders, model, sdk_session)

    assert outputs == ["tests pass", "done"]
    calls = model.calls
    assert len(calls) == 3
    first = user_texts(calls[0].input)
    assert first[0] == "Fix the bug."
    assert first[-1].startswith('<context-directives speaker="harness">') and BODY in first[-1]
    # The model input only: the SDK session's stored items never hold an envelope.
    stored = await sdk_session.get_items()
    assert all("<context-directives" not in text for text in user_texts(stored))
    counters = await wait_for_counters(
        ledger_stack.url,
        sdk_session.session_id,
        {"delivered": 1, "post_turn": 2, "provider_evaluated": 4},
    )
    assert counters["post_turn"] == 2


async def test_with_the_ledger_down_the_agent_completes_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="reminder_ledger.integrations")
    model = scripted_model()
    reminders = ReminderRun(ReminderOptions(nats_url=dead_nats_url()), group_id="agents-down")

    outputs = await two_turns(reminders, model, SQLiteSession("agents-down"))

    assert outputs == ["tests pass", "done"]
    assert all("<context-directives" not in t for c in model.calls for t in user_texts(c.input))
    logged = [
        r for r in caplog.records if r.name == "reminder_ledger.integrations" and r.levelno >= 30
    ]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "unreachable" in logged[0].getMessage()
