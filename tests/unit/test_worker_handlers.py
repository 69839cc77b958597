"""The workers' handlers are plain functions of (event, ports): tested here without a broker."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from contracts.events import Event
from services.adapters.telemetry import LabelledCount
from services.consumer import ACK, Settlement
from services.observer.app import ObserverMetrics, handle_event
from services.propagator.app import PropagatorMetrics, handle_handed_off
from tests.support import Driver


def handed_off_event() -> Event:
    parent = Driver("parent")
    parent.inject("share this", propagate="all")
    decision = parent.run("handoff", child_session_id="child", sub_agent_id="helper")
    return next(event for event in decision.events if event.kind == "handed_off")


def fired_event(session_id: str = "s1") -> Event:
    driver = Driver(session_id)
    driver.inject("look at the failing test", tags=["tests"])
    decision = driver.run("render", turn=0)
    return next(event for event in decision.events if event.kind == "fired")


class Gateway:
    """A fake gateway: records each request and answers with the next reply."""

    def __init__(self, *replies: dict[str, Any] | Exception) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, op: str, command: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((op, command))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


async def test_the_propagator_sends_one_inherit_for_the_child_and_acks_on_ok() -> None:
    gateway = Gateway({"ok": True, "session_seq": 3})
    event = handed_off_event()

    outcome = await handle_handed_off(event, gateway)

    assert outcome == ACK
    [(op, command)] = gateway.requests
    assert op == "inherit"
    assert command["session_id"] == "child"
    assert command["parent_session_id"] == "parent"
    assert command["handoff_event_id"] == event.event_id
    assert [spec["body"] for spec in command["reminders"]] == ["share this"]


@pytest.mark.parametrize(
    "reply",
    [
        TimeoutError(),
        {"ok": False, "error": {"code": "unavailable"}},
        {"ok": False, "error": {"code": "conflict"}},
        {"ok": False, "error": {"code": "rate_limited"}},
    ],
)
async def test_the_propagator_asks_for_redelivery_while_the_gateway_is_away_or_busy(
    reply: dict[str, Any] | Exception,
) -> None:
    outcome = await handle_handed_off(handed_off_event(), Gateway(reply))

    assert outcome.action == "retry" and outcome.delay_s > 0


async def test_the_propagator_dead_letters_what_the_gateway_refuses_for_good() -> None:
    refusal = {"ok": False, "error": {"code": "HARN-RMD-001", "message": "bad"}}

    outcome = await handle_handed_off(handed_off_event(), Gateway(refusal))

    assert outcome.action == "dead_letter" and outcome.code == "HARN-RMD-001"


async def test_the_propagator_dead_letters_an_event_that_is_not_a_handoff() -> None:
    gateway = Gateway()

    outcome = await handle_handed_off(fired_event(), gateway)

    assert outcome.action == "dead_letter" and outcome.code == "invalid_event"
    assert gateway.requests == []


async def test_the_propagator_counts_each_handoff_and_reminder_by_outcome() -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    metrics = PropagatorMetrics.create(MeterProvider().get_meter("test-propagator"))
    applied = {"ok": True, "session_seq": 3, "inherited_ids": ["a", "b"], "skipped_ids": ["c"]}
    replies: list[dict[str, Any] | Exception] = [
        applied,
        {"ok": True, "session_seq": 3, "already_applied": True},
        TimeoutError(),
        {"ok": False, "error": {"code": "HARN-RMD-001", "message": "bad"}},
    ]
    for reply in replies:
        await handle_handed_off(handed_off_event(), Gateway(reply), metrics)
    await handle_handed_off(fired_event(), Gateway(), metrics)

    def counts(count: LabelledCount) -> dict[str, float]:
        return {
            str(o.attributes["outcome"]): o.value
            for o in count.observe(None)  # type: ignore[arg-type]
            if o.attributes
        }

    assert counts(metrics.handoffs) == {
        "applied": 1,
        "already_applied": 1,
        "retried": 1,
        "dead_lettered": 2,
    }
    assert counts(metrics.reminders) == {"inherited": 2, "skipped": 1}


class Published:
    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []

    async def __call__(self, subject: str, body: bytes) -> None:
        self.messages.append((subject, body))


@pytest.fixture(scope="module")
def metrics() -> ObserverMetrics:
    return ObserverMetrics.create()


async def test_the_observer_notifies_acp_clients_of_a_fired_reminder(
    metrics: ObserverMetrics,
) -> None:
    published = Published()

    outcome: Settlement = await handle_event(fired_event("s1"), metrics, published)

    assert outcome == ACK
    [(subject, body), (extension_subject, extension_body)] = published.messages
    assert subject == extension_subject == "reminders.v1.acp.s1"
    notification = orjson.loads(body)
    assert notification["method"] == "session/update"
    assert notification["params"]["sessionId"] == "s1"
    update = notification["params"]["update"]
    assert update["sessionUpdate"] == "reminder_emitted"
    reminder = update["_meta"]["harn"]["reminder"]
    assert reminder["body"] == "look at the failing test"
    assert reminder["tags"] == ["tests"]
    # Right after it, the ACP extension notification with the very same reminder fields.
    extension = orjson.loads(extension_body)
    assert extension == {
        "jsonrpc": "2.0",
        "method": "_reminders/emitted",
        "params": {"sessionId": "s1", "reminder": reminder},
    }
    assert set(reminder) == {
        "reminderId",
        "tags",
        "body",
        "roleHint",
        "authority",
        "renderedRole",
        "source",
        "ttlTurns",
    }
    assert "id" not in extension  # a notification: no response is ever expected


async def test_the_observer_names_the_acp_subject_by_session_token(
    metrics: ObserverMetrics,
) -> None:
    published = Published()

    await handle_event(fired_event("a session/with spaces"), metrics, published)

    subjects = {subject for subject, _ in published.messages}
    assert len(published.messages) == 2 and len(subjects) == 1
    [subject] = subjects
    assert subject.startswith("reminders.v1.acp.=") and " " not in subject
    for _, body in published.messages:
        assert orjson.loads(body)["params"]["sessionId"] == "a session/with spaces"


async def test_the_observer_publishes_nothing_for_other_kinds(metrics: ObserverMetrics) -> None:
    published = Published()

    outcome = await handle_event(handed_off_event(), metrics, published)

    assert outcome == ACK
    assert published.messages == []
