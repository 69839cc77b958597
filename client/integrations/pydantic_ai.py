"""pydantic-ai: reminders as a capability of the agent (extra `pydantic-ai`).

    from client.integrations.pydantic_ai import ReminderCapability

    agent = Agent(model, capabilities=[ReminderCapability()])

Before each model request it renders the session's reminders and puts the envelope in the
request's user turn (SPEC §5.5), in the request only: the run's history never holds it (in
pydantic-ai a history processor's output replaces the run's history, so the envelope would be
kept and re-sent; the capability's `before_model_request` is the hook whose message list is the
request's own). Tool results about to go to the model are published as `tool_result` runtime
events, each response's usage as a `budget` reading (when `context_window` is set), and the
turn ends when the run has produced its final answer. The session is the run's
`conversation_id` (shared by runs that continue one message history) unless given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext

from client.integrations.ledger import (
    ReminderOptions,
    Rendered,
    budget_payload,
    foldable,
    tool_result_payload,
)

__all__ = ["ReminderCapability", "ReminderOptions"]


@dataclass
class ReminderCapability(AbstractCapability[Any]):
    """Render before each model request, publish runtime events, end the turn after the run."""

    options: ReminderOptions = field(default_factory=ReminderOptions)

    def _session_id(self, ctx: RunContext[Any]) -> str:
        return self.options.session_id or ctx.conversation_id or ctx.run_id or "pydantic-ai"

    def _agent_id(self, ctx: RunContext[Any]) -> str | None:
        if self.options.agent_id:
            return self.options.agent_id
        return ctx.agent.name if ctx.agent is not None and ctx.agent.name else None

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Publish the tool results this request carries, then add the envelope to it."""
        ledger = self.options.ledger()
        session_id, agent_id = self._session_id(ctx), self._agent_id(ctx)
        for part in _new_tool_returns(request_context.messages):
            payload = tool_result_payload(part.tool_name, part.model_response_str())
            await ledger.run(
                ledger.publish(
                    session_id,
                    "tool_result",
                    payload,
                    agent_id=agent_id,
                    event_id=f"{session_id}:{part.tool_call_id}:tool_result"[:128],
                )
            )
        rendered = await ledger.run(
            ledger.render(
                session_id,
                max_tokens=self.options.budget(),
                format=self.options.format,
                user_text=_opening_user_text(request_context.messages),
            )
        )
        if rendered is not None:
            request_context.messages = _with_envelope(request_context.messages, rendered)
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        """A `budget` reading from the response's usage."""
        reading = budget_payload(response.usage.input_tokens, self.options.context_window)
        if reading is not None:
            ledger = self.options.ledger()
            await ledger.run(
                ledger.publish(
                    self._session_id(ctx), "budget", reading, agent_id=self._agent_id(ctx)
                )
            )
        return response

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """The run gave its final answer: the turn ends."""
        ledger = self.options.ledger()
        await ledger.run(ledger.end_turn(self._session_id(ctx)))
        return result

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not spec-serialisable: its options are the host's."""
        return None


def _new_tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart[Any]]:
    """The tool results in the request about to be sent (older ones went out before)."""
    if not messages or not isinstance(messages[-1], ModelRequest):
        return []
    return [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]


def _opening_user_text(messages: Sequence[ModelMessage]) -> str | None:
    """The user's prompt when this request opens a turn (it ends with the user's text)."""
    if messages and isinstance(messages[-1], ModelRequest) and messages[-1].parts:
        last = messages[-1].parts[-1]
        if isinstance(last, UserPromptPart):
            return foldable(last.content)
    return None


def _with_envelope(messages: list[ModelMessage], rendered: Rendered) -> list[ModelMessage]:
    """A copy of `messages` whose last request carries the envelope in the user's turn:
    folded into the user's prompt by the ledger (SPEC §5.5 `inline`) when the request opens
    the turn, else as a user part after the tool results. The request is a new object, so
    the run's history keeps the original."""
    copied = list(messages)
    if not copied or not isinstance(copied[-1], ModelRequest):
        return [*copied, ModelRequest(parts=[UserPromptPart(content=rendered.text)])]
    last = copied[-1]
    parts = list(last.parts)
    if rendered.inline is not None and parts and isinstance(parts[-1], UserPromptPart):
        parts[-1] = replace(parts[-1], content=str(rendered.inline["text"]))
    else:
        parts.append(UserPromptPart(content=rendered.text))
    copied[-1] = replace(last, parts=parts)
    return copied
