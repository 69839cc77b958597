"""`null_gateway --core` does the core's part of each command for real: the request is
validated, decided against the session's state it keeps, and the events are folded into it.
So `bench.gateway_floor`'s middle figure is the price of real decisions. And
`null_gateway --atomic` sends what a gateway sends for the load's commands: as many events,
of the same kinds and sizes, each with a message id of its own."""

from __future__ import annotations

import orjson
import pytest

from bench.null_gateway import decided_by_core, inject_template, templated
from bench.traffic import inject_payload
from contracts.errors import ReminderError
from contracts.state import SessionState


def test_each_command_is_decided_on_the_state_the_one_before_left() -> None:
    states: dict[str, SessionState] = {}
    first_events, _ = decided_by_core("inject", inject_payload("s-1", 0), states)
    second_events, second_data = decided_by_core("inject", inject_payload("s-1", 1), states)
    assert [event.kind for event in first_events] == ["injected"]
    # The second inject replaced the first by its dedupe key: deduped, then injected.
    assert [event.kind for event in second_events] == ["deduped", "injected"]
    assert states["s-1"].session_seq == 3
    assert len(states["s-1"].pending) == 1
    assert orjson.loads(second_data[-1])["session_seq"] == 3
    assert orjson.loads(second_data[-1])["chain"] == states["s-1"].chain_head
    assert [orjson.loads(data)["event_id"] for data in second_data] == [
        event.event_id for event in second_events
    ]


def test_a_request_the_gateway_would_refuse_is_refused() -> None:
    with pytest.raises(ReminderError):
        decided_by_core("inject", {"session_id": "s-1"}, {})


def test_the_atomic_template_is_what_the_core_writes_for_the_loads_commands() -> None:
    states: dict[str, SessionState] = {}
    decided = [decided_by_core("inject", inject_payload("s-1", n), states) for n in range(3)]
    # The session id is in every event's bytes: a template of one as long is as long.
    template = inject_template("s-9")
    for number, (events, data) in enumerate(decided):
        sent_events, sent_data = templated("s-2", number == 0, template)
        assert [event.kind for event in sent_events] == [event.kind for event in events]
        assert [len(sent) for sent in sent_data] == [len(made) for made in data]
        assert all(event.session_id == "s-2" for event in sent_events)


def test_every_message_the_atomic_null_gateway_sends_has_an_id_of_its_own() -> None:
    template = inject_template()
    sent = [templated("s-1", False, template)[0] for _ in range(50)]
    ids = [event.event_id for events in sent for event in events]
    assert len(ids) == len(set(ids)) == 100
