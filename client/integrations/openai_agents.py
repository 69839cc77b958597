"""OpenAI Agents SDK: reminders through the run config and run hooks (extra `openai-agents`).

    from client.integrations.openai_agents import ReminderRun

    reminders = ReminderRun(session=session)  # one per conversation, reused across turns
    result = await Runner.run(
        agent, prompt, session=session, run_config=reminders.run_config(), hooks=reminders.hooks
    )

`run_config()` sets `call_model_input_filter`, which renders the session's reminders into the
model's input only before each model call, as a user message at the end of the input (in the
user's turn, SPEC §5.5, but as an item of its own: the SDK tracks the input items it prepared
by identity, for server-managed conversations, and refuses a filter that rebuilt one, so the
user's own item is passed through untouched); the run's items and the SDK session never hold
the envelope. `hooks` publishes each tool's output as a `tool_result`
runtime event (`on_tool_end`), each response's usage as a `budget` reading (`on_llm_end`, when
`context_window` is set), and ends the turn when the run's final agent produced its output
(`on_agent_end`). The ledger session is the SDK session's `session_id`, else the run config's
`group_id` (the SDK's conversation grouping), else one fresh id per `ReminderRun`.
"""

from __future__ import annotations

import uuid
from typing import Any

from agents import Agent, RunConfig, RunContextWrapper, RunHooks, Tool
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import Session
from agents.run_config import CallModelData, ModelInputData
from agents.tool_context import ToolContext

from client.integrations.ledger import (
    ReminderOptions,
    Rendered,
    budget_payload,
    tool_result_payload,
)

__all__ = ["ReminderOptions", "ReminderRun"]


class ReminderRun:
    """The reminders of one conversation: a run config filter and run hooks bound to it."""

    def __init__(
        self,
        options: ReminderOptions | None = None,
        *,
        session: Session | None = None,
        group_id: str | None = None,
    ) -> None:
        self.options = options or ReminderOptions()
        self.group_id = group_id
        self.session_id = (
            self.options.session_id
            or (session.session_id if session is not None else None)
            or group_id
            or f"openai-agents-{uuid.uuid4()}"
        )
        self.hooks = _ReminderHooks(self)

    def agent_id(self, agent: Agent[Any] | Any) -> str | None:
        """The options' agent id, else the SDK agent's name."""
        name = getattr(agent, "name", None)
        return self.options.agent_id or (str(name) if name else None)

    def run_config(self, **settings: Any) -> RunConfig:
        """A `RunConfig` with the reminders' input filter (and `group_id` when given);
        `settings` are any other `RunConfig` fields."""
        if self.group_id is not None:
            settings.setdefault("group_id", self.group_id)
        return RunConfig(call_model_input_filter=self.call_model_input_filter, **settings)

    async def call_model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """Render into this model call's input only."""
        ledger = self.options.ledger()
        items = list(data.model_data.input)
        rendered = await ledger.run(
            ledger.render(
                self.session_id,
                max_tokens=self.options.budget(),
                format=self.options.format,
            )
        )
        if rendered is None:
            return data.model_data
        return ModelInputData(
            input=_with_envelope(items, rendered), instructions=data.model_data.instructions
        )


class _ReminderHooks(RunHooks[Any]):
    """Runtime events and the end of the turn, from the SDK's run lifecycle."""

    def __init__(self, run: ReminderRun) -> None:
        self._run = run

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        """A tool's output reached the model: a `tool_result` runtime event."""
        run = self._run
        ledger = run.options.ledger()
        call_id = context.tool_call_id if isinstance(context, ToolContext) else None
        await ledger.run(
            ledger.publish(
                run.session_id,
                "tool_result",
                tool_result_payload(tool.name, str(result)),
                agent_id=run.agent_id(agent),
                event_id=f"{run.session_id}:{call_id}:tool_result"[:128] if call_id else None,
            )
        )

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """A `budget` reading from the response's usage."""
        run = self._run
        reading = budget_payload(response.usage.input_tokens, run.options.context_window)
        if reading is not None:
            ledger = run.options.ledger()
            await ledger.run(
                ledger.publish(run.session_id, "budget", reading, agent_id=run.agent_id(agent))
            )

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        """The run's final agent produced its output: the turn ends."""
        ledger = self._run.options.ledger()
        await ledger.run(ledger.end_turn(self._run.session_id))


def _with_envelope(items: list[TResponseInputItem], rendered: Rendered) -> list[TResponseInputItem]:
    """The input items, unchanged, then the envelope as a user message."""
    envelope: Any = {"role": "user", "content": rendered.text}
    return [*items, envelope]
