"""`null_gateway --core` does the core's part of each command for real: the request is
validated, decided against the session's state it keeps, and the events are folded into it.
So `bench.gateway_floor`'s middle figure is the price of real decisions."""

from __future__ import annotations

import orjson
import pytest

from bench.null_gateway import decided_by_core
from bench.write_path import inject_payload
from contracts.errors import ReminderError
from contracts.state import SessionState


def test_each_command_is_decided_on_the_state_the_one_before_left() -> None:
    states: dict[str, SessionState] = {}
    first = decided_by_core("inject", inject_payload("s-1", 0), states)
    second = decided_by_core("inject", inject_payload("s-1", 1), states)
    assert first[0] == second[0] == "injected"
    # The second inject replaced the first by its dedupe key: deduped, then injected.
    assert states["s-1"].session_seq == 3
    assert len(states["s-1"].pending) == 1
    assert orjson.loads(second[1])["session_seq"] == 3
    assert orjson.loads(second[1])["chain"] == states["s-1"].chain_head


def test_a_request_the_gateway_would_refuse_is_refused() -> None:
    with pytest.raises(ReminderError):
        decided_by_core("inject", {"session_id": "s-1"}, {})
