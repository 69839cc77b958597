"""LangChain and LangGraph: reminders as agent middleware (extra `langchain`).

    from client.integrations.langchain import ReminderMiddleware

    agent = create_agent(model, tools, middleware=[ReminderMiddleware()])

Before each model call the middleware renders the session's reminders into the request's
messages only (the graph state never holds the envelope): folded into the user's message
when the call opens the turn (SPEC §5.5), else as a user message after the tool results.
Tool messages new to this call are published as `tool_result` runtime events, the response's
usage metadata as a `budget` reading (context window from the options, else the model's
profile), and the turn ends after the agent's final answer. The session is the graph's
`thread_id` (else its run id) unless given. For LangGraph's prebuilt `create_react_agent`,
`middleware.pre_model_hook` and `middleware.post_model_hook` do the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.config import get_config
from langgraph.runtime import Runtime

from client.integrations.ledger import (
    ReminderOptions,
    Rendered,
    budget_payload,
    foldable,
    tool_result_payload,
)

__all__ = ["ReminderMiddleware", "ReminderOptions"]

Messages = list[AnyMessage]


class ReminderMiddleware(AgentMiddleware[Any, Any, Any]):
    """Render before each model call, publish runtime events, end the turn after the answer."""

    def __init__(self, options: ReminderOptions | None = None) -> None:
        super().__init__()
        self.options = options or ReminderOptions()

    # -- ids -------------------------------------------------------------------------------

    def _ids(
        self, runtime: Runtime[Any] | None, config: RunnableConfig | None = None
    ) -> tuple[str, str | None]:
        """(session id, agent id): the options', else the graph's thread and agent name."""
        config = config if config is not None else _current_config()
        configurable = (config or {}).get("configurable") or {}
        metadata = (config or {}).get("metadata") or {}
        info = runtime.execution_info if runtime is not None else None
        session_id = (
            self.options.session_id
            or (info.thread_id if info is not None else None)
            or configurable.get("thread_id")
            or (info.run_id if info is not None else None)
            or str((config or {}).get("run_id") or "langchain")
        )
        agent_id = self.options.agent_id or metadata.get("lc_agent_name")
        return str(session_id), (str(agent_id) if agent_id else None)

    # -- the steps, as coroutines on the ledger's loop --------------------------------------

    async def _before(
        self, messages: Sequence[AnyMessage], session_id: str, agent_id: str | None
    ) -> Messages:
        ledger = self.options.ledger()
        for message in _new_tool_messages(messages):
            payload = tool_result_payload(message.name or "tool", _text(message.content))
            await ledger.publish(
                session_id,
                "tool_result",
                payload,
                agent_id=agent_id,
                event_id=f"{session_id}:{message.tool_call_id}:tool_result"[:128],
            )
        opening = _opening_user_text(messages)
        rendered = await ledger.render(
            session_id,
            max_tokens=self.options.budget(),
            format=self.options.format,
            user_text=opening,
        )
        return _with_envelope(list(messages), rendered)

    async def _after(
        self, result: Sequence[BaseMessage], model: object, session_id: str, agent_id: str | None
    ) -> None:
        ledger = self.options.ledger()
        reading = budget_payload(_input_tokens(result), self._context_window(model))
        if reading is not None:
            await ledger.publish(session_id, "budget", reading, agent_id=agent_id)

    def _context_window(self, model: object) -> int | None:
        if self.options.context_window:
            return self.options.context_window
        profile = getattr(model, "profile", None) if isinstance(model, BaseChatModel) else None
        window = (profile or {}).get("max_input_tokens")
        return int(window) if isinstance(window, int) else None

    # -- create_agent middleware hooks ------------------------------------------------------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Sync model call: render into the request, then read the response's usage."""
        ledger = self.options.ledger()
        session_id, agent_id = self._ids(request.runtime)
        messages = ledger.sync(
            self._before(request.messages, session_id, agent_id), list(request.messages)
        )
        response = handler(request.override(messages=messages))
        ledger.sync(self._after(response.result, request.model, session_id, agent_id), None)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Async model call: render into the request, then read the response's usage."""
        ledger = self.options.ledger()
        session_id, agent_id = self._ids(request.runtime)
        messages = await ledger.run(self._before(request.messages, session_id, agent_id))
        response = await handler(request.override(messages=messages))
        await ledger.run(self._after(response.result, request.model, session_id, agent_id))
        return response

    def after_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The agent gave its final answer: the turn ends."""
        ledger = self.options.ledger()
        ledger.sync(ledger.end_turn(self._ids(runtime)[0]), None)
        return None

    async def aafter_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The agent gave its final answer: the turn ends."""
        ledger = self.options.ledger()
        await ledger.run(ledger.end_turn(self._ids(runtime)[0]))
        return None

    # -- LangGraph's prebuilt agent ---------------------------------------------------------

    @property
    def pre_model_hook(self) -> RunnableLambda[Any, dict[str, Any]]:
        """For `create_react_agent(pre_model_hook=...)`: the model's input as
        `llm_input_messages`, so the graph's `messages` stay as they were."""

        async def before(state: Any, config: RunnableConfig) -> dict[str, Any]:
            session_id, agent_id = self._ids(None, config)
            ledger = self.options.ledger()
            messages = await ledger.run(self._before(_state_messages(state), session_id, agent_id))
            return {"llm_input_messages": messages}

        def before_sync(state: Any, config: RunnableConfig) -> dict[str, Any]:
            session_id, agent_id = self._ids(None, config)
            ledger = self.options.ledger()
            messages = _state_messages(state)
            messages = ledger.sync(self._before(messages, session_id, agent_id), messages)
            return {"llm_input_messages": messages}

        return RunnableLambda(before_sync, afunc=before, name="reminders_pre_model_hook")

    @property
    def post_model_hook(self) -> RunnableLambda[Any, dict[str, Any]]:
        """For `create_react_agent(post_model_hook=...)`: the `budget` reading, and the turn's
        end when the model answered without calling a tool."""

        async def after(state: Any, config: RunnableConfig) -> dict[str, Any]:
            session_id, agent_id = self._ids(None, config)
            ledger = self.options.ledger()
            messages = _state_messages(state)
            await ledger.run(self._after(messages[-1:], None, session_id, agent_id))
            if _is_final_answer(messages):
                await ledger.run(ledger.end_turn(session_id))
            return {}

        def after_sync(state: Any, config: RunnableConfig) -> dict[str, Any]:
            session_id, agent_id = self._ids(None, config)
            ledger = self.options.ledger()
            messages = _state_messages(state)
            ledger.sync(self._after(messages[-1:], None, session_id, agent_id), None)
            if _is_final_answer(messages):
                ledger.sync(ledger.end_turn(session_id), None)
            return {}

        return RunnableLambda(after_sync, afunc=after, name="reminders_post_model_hook")


def _current_config() -> RunnableConfig | None:
    try:
        return get_config()
    except RuntimeError:  # outside a runnable context
        return None


def _state_messages(state: Any) -> Messages:
    messages = state.get("messages") if isinstance(state, dict) else state.messages
    return list(messages or [])


def _text(content: str | list[Any]) -> str:
    """A message's text: its string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    return "\n".join(
        str(block.get("text", "")) if isinstance(block, dict) else str(block) for block in content
    )


def _new_tool_messages(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    """The tool results after the model's last message: new to this call."""
    new: list[ToolMessage] = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        new.insert(0, message)
    return new


def _opening_user_text(messages: Sequence[AnyMessage]) -> str | None:
    """The user's text when this call opens a turn (the last message is the user's)."""
    if messages and isinstance(messages[-1], HumanMessage):
        return foldable(messages[-1].content)
    return None


def _with_envelope(messages: Messages, rendered: Rendered | None) -> Messages:
    """`messages` with the envelope in the user's turn: folded into the user's message by
    the ledger (§5.5 `inline`), else as a user message of its own at the end."""
    if rendered is None:
        return messages
    if rendered.inline is not None and messages and isinstance(messages[-1], HumanMessage):
        folded = messages[-1].model_copy(update={"content": str(rendered.inline["text"])})
        return [*messages[:-1], folded]
    return [*messages, HumanMessage(content=rendered.text)]


def _input_tokens(result: Sequence[BaseMessage]) -> int | None:
    for message in reversed(result):
        if isinstance(message, AIMessage) and message.usage_metadata:
            return int(message.usage_metadata.get("input_tokens", 0))
    return None


def _is_final_answer(messages: Sequence[AnyMessage]) -> bool:
    return bool(messages) and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls
