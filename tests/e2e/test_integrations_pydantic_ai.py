"""pydantic-ai with `ReminderCapability` against a real `reminders up`: a two-turn agent with
one tool call, driven by pydantic-ai's own `FunctionModel` (no network)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from client.integrations.pydantic_ai import ReminderCapability, ReminderOptions
from tests.e2e.integration_stack import Stack, dead_nats_url, inject, wait_for_counters

BODY = "Run the tests before you answer."


def user_texts(messages: list[ModelMessage]) -> list[str]:
    """Every user part's text, in order."""
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def scripted_agent(options: ReminderOptions, seen: list[list[ModelMessage]]) -> Agent[None, str]:
    """First prompt: call `run_tests`, then answer; later prompts: answer at once."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        usage = RequestUsage(input_tokens=900, output_tokens=10)
        last = messages[-1]
        asked_for_tool = len(seen) == 1
        if asked_for_tool:
            return ModelResponse(parts=[ToolCallPart("run_tests", {})], usage=usage)
        answered = any(isinstance(p, ToolReturnPart) for p in getattr(last, "parts", []))
        text = "tests pass" if answered else "done"
        return ModelResponse(parts=[TextPart(text)], usage=usage)

    agent: Agent[None, str] = Agent(
        FunctionModel(respond),
        name="coder",
        capabilities=[ReminderCapability(options)],
    )

    @agent.tool_plain
    def run_tests() -> str:
        """Run the test suite."""
        return "===== 3 passed in 0.01s ====="

    return agent


async def test_the_model_gets_the_envelope_and_the_log_has_every_step(
    ledger_stack: Stack,
) -> None:
    session = f"pydantic-{uuid.uuid4().hex[:8]}"
    await inject(ledger_stack.url, session, BODY, ttl_turns=2)
    options = ReminderOptions(session_id=session, nats_url=ledger_stack.url, context_window=1000)
    seen: list[list[ModelMessage]] = []
    agent = scripted_agent(options, seen)

    first = await agent.run("Fix the bug.")
    second = await agent.run("Anything else?", message_history=first.all_messages())

    assert first.output == "tests pass" and second.output == "done"
    assert len(seen) == 3  # tool call, answer; then the second turn's answer
    first_call = user_texts(seen[0])
    # Folded into the user's turn (SPEC §5.5): the prompt, a blank line, the envelope.
    assert first_call[-1].startswith('Fix the bug.\n\n<context-directives speaker="harness">')
    assert BODY in first_call[-1]
    # The model input only: the run's history never holds an envelope.
    for message in second.all_messages():
        for text in user_texts([message]):
            assert "<context-directives" not in text
    counters = await wait_for_counters(
        ledger_stack.url,
        session,
        {"delivered": 1, "post_turn": 2, "provider_evaluated": 4},
    )
    assert counters["post_turn"] == 2


async def test_with_the_ledger_down_the_agent_completes_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="reminder_ledger.integrations")
    options = ReminderOptions(session_id="pydantic-down", nats_url=dead_nats_url())
    seen: list[list[ModelMessage]] = []
    agent = scripted_agent(options, seen)

    first = await agent.run("Fix the bug.")
    second = await agent.run("Anything else?", message_history=first.all_messages())

    assert (first.output, second.output) == ("tests pass", "done")
    assert all("<context-directives" not in t for call in seen for t in user_texts(call))
    warnings: list[Any] = [
        r for r in caplog.records if r.name == "reminder_ledger.integrations" and r.levelno >= 30
    ]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "unreachable" in warnings[0].getMessage()
