"""What an ACP client built on the `agent-client-protocol` package does with the observer's two
notifications (SPEC §8), driven through the package's own client-side router."""

from __future__ import annotations

from typing import Any

import pytest
from acp.client.router import build_client_router
from pydantic import ValidationError

from contracts.events import Event
from services.observer.app import acp_extension_notification, acp_notification
from tests.support import Driver


def fired_event(session_id: str = "acp-s1") -> Event:
    driver = Driver(session_id)
    driver.inject("CI is red on main.", tags=["ci"], ttl_turns=2)
    decision = driver.run("render", turn=0)
    return next(event for event in decision.events if event.kind == "fired")


class RecordingClient:
    """The two handlers an ACP client implements for these notifications."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.extensions: list[tuple[str, dict[str, Any]]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.extensions.append((method, params))


async def test_the_extension_notification_reaches_the_clients_extension_handler() -> None:
    client = RecordingClient()
    router = build_client_router(client)  # type: ignore[arg-type]
    message = acp_extension_notification(fired_event())

    await router(message["method"], message["params"], True)

    # The package strips the leading `_` of an extension method before calling the handler.
    [(method, params)] = client.extensions
    assert method == "reminders/emitted"
    assert params["sessionId"] == "acp-s1"
    assert params["reminder"]["body"] == "CI is red on main."
    assert params["reminder"]["tags"] == ["ci"]
    assert params["reminder"]["ttlTurns"] == 2
    assert client.updates == []


async def test_the_reference_session_update_is_rejected_by_the_closed_union() -> None:
    client = RecordingClient()
    router = build_client_router(client)  # type: ignore[arg-type]
    message = acp_notification(fired_event())

    with pytest.raises(ValidationError) as raised:
        await router(message["method"], message["params"], True)

    [error] = raised.value.errors()
    assert error["type"] == "union_tag_invalid"
    assert error["loc"] == ("update",)
    assert "reminder_emitted" in str(error["ctx"])
    assert client.updates == [] and client.extensions == []


async def test_a_client_without_an_extension_handler_ignores_the_extension() -> None:
    class UpdatesOnly:
        def __init__(self) -> None:
            self.updates: list[Any] = []

        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            self.updates.append(update)

    client = UpdatesOnly()
    router = build_client_router(client)  # type: ignore[arg-type]
    message = acp_extension_notification(fired_event())

    assert await router(message["method"], message["params"], True) is None
    assert client.updates == []
