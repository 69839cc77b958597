"""LangChain's `create_agent` with `ReminderMiddleware`, and LangGraph's prebuilt agent with its
pre/post model hooks, against a real `reminders up`: a two-turn agent with one tool call,
driven by LangChain's own fake chat model (no network)."""

from __future__ import annotations

import asyncio
import logging
import uuid
import warnings
from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from client.integrations.langchain import ReminderMiddleware, ReminderOptions
from tests.e2e.integration_stack import Stack, dead_nats_url, inject, wait_for_counters

BODY = "Run the tests before you answer."
USAGE = {"input_tokens": 900, "output_tokens": 10, "total_tokens": 910}


class RecordingFakeModel(FakeMessagesListChatModel):
    """The fake chat model, recording what it was given and accepting tools."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> RecordingFakeModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def scripted_model() -> RecordingFakeModel:
    """Turn 1: call `run_tests`, then answer; turn 2: answer at once."""
    return RecordingFakeModel(
        seen=[],
        responses=[
            AIMessage(
                "",
                tool_calls=[{"name": "run_tests", "args": {}, "id": "call-1"}],
                usage_metadata=USAGE,
            ),
            AIMessage("tests pass", usage_metadata=USAGE),
            AIMessage("done", usage_metadata=USAGE),
        ],
    )


@tool
def run_tests() -> str:
    """Run the test suite."""
    return "===== 3 passed in 0.01s ====="


def texts(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, HumanMessage)]


def assert_envelope_reached_the_model_only(
    model: RecordingFakeModel, state_messages: list[BaseMessage]
) -> None:
    assert len(model.seen) == 3
    opening = texts(model.seen[0])[-1]
    assert opening.startswith("Fix the bug.\n\n<context-directives speaker=")  # §5.5 folded
    assert BODY in opening
    for message in state_messages:
        assert "<context-directives" not in str(message.content)


async def test_create_agent_middleware_renders_and_logs_every_step(ledger_stack: Stack) -> None:
    session = f"langchain-{uuid.uuid4().hex[:8]}"
    await inject(ledger_stack.url, session, BODY, ttl_turns=2)
    model = scripted_model()
    middleware = ReminderMiddleware(ReminderOptions(nats_url=ledger_stack.url, context_window=1000))
    agent = create_agent(
        model, [run_tests], middleware=[middleware], checkpointer=InMemorySaver(), name="coder"
    )
    config: Any = {"configurable": {"thread_id": session}}  # the session id comes from here

    first = await agent.ainvoke({"messages": [HumanMessage("Fix the bug.")]}, config)
    second = await agent.ainvoke({"messages": [HumanMessage("Anything else?")]}, config)

    assert first["messages"][-1].content == "tests pass"
    assert second["messages"][-1].content == "done"
    assert_envelope_reached_the_model_only(model, second["messages"])
    counters = await wait_for_counters(
        ledger_stack.url, session, {"delivered": 1, "post_turn": 2, "provider_evaluated": 4}
    )
    assert counters["post_turn"] == 2


async def test_prebuilt_agent_hooks_render_and_log_every_step(ledger_stack: Stack) -> None:
    from langgraph.prebuilt import create_react_agent

    session = f"langgraph-{uuid.uuid4().hex[:8]}"
    await inject(ledger_stack.url, session, BODY, ttl_turns=2)
    model = scripted_model()
    middleware = ReminderMiddleware(ReminderOptions(nats_url=ledger_stack.url, context_window=1000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of the above
        agent = create_react_agent(
            model,
            [run_tests],
            pre_model_hook=middleware.pre_model_hook,
            post_model_hook=middleware.post_model_hook,
            checkpointer=InMemorySaver(),
        )
    config: Any = {"configurable": {"thread_id": session}}

    def two_turns() -> tuple[dict[str, Any], dict[str, Any]]:  # the sync path, in a thread
        first = agent.invoke({"messages": [HumanMessage("Fix the bug.")]}, config)
        return first, agent.invoke({"messages": [HumanMessage("Anything else?")]}, config)

    first, second = await asyncio.to_thread(two_turns)

    assert first["messages"][-1].content == "tests pass"
    assert second["messages"][-1].content == "done"
    assert_envelope_reached_the_model_only(model, second["messages"])
    counters = await wait_for_counters(
        ledger_stack.url, session, {"delivered": 1, "post_turn": 2, "provider_evaluated": 4}
    )
    assert counters["post_turn"] == 2


async def test_with_the_ledger_down_the_agent_completes_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="reminder_ledger.integrations")
    model = scripted_model()
    middleware = ReminderMiddleware(ReminderOptions(nats_url=dead_nats_url()))
    agent = create_agent(model, [run_tests], middleware=[middleware], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "langchain-down"}}

    first = await agent.ainvoke({"messages": [HumanMessage("Fix the bug.")]}, config)
    second = await agent.ainvoke({"messages": [HumanMessage("Anything else?")]}, config)

    assert (first["messages"][-1].content, second["messages"][-1].content) == ("tests pass", "done")
    assert all("<context-directives" not in t for call in model.seen for t in texts(call))
    logged = [
        r for r in caplog.records if r.name == "reminder_ledger.integrations" and r.levelno >= 30
    ]
    assert len(logged) == 1, [r.getMessage() for r in logged]
    assert "unreachable" in logged[0].getMessage()
