"""Properties of the providers' evaluation (SPEC §9): deterministic for any run of runtime
events, and a once-latch fires once per session whatever the order and the redeliveries."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.events import ProviderEvaluated
from tests.unit.test_providers import (
    Session,
    budget,
    rules_config,
    runtime,
)

# --- properties -------------------------------------------------------------------------

ONCE = rules_config('id = "once"\nwhen = { once = true }\nreminder = { body = "only once" }')
EVENTS = st.lists(
    st.one_of(
        st.builds(lambda u: ("budget", budget(u)), st.integers(0, 200_000)),
        st.builds(lambda t: ("user_turn", {"text": t}), st.text(max_size=20)),
        st.builds(lambda i: ("session_idle", {"idle_seconds": i}), st.integers(0, 200)),
        st.builds(lambda tr: ("tool_result", {"tool_name": "x", "truncated": tr}), st.booleans()),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(EVENTS)
def test_evaluation_is_deterministic(events: list[tuple[str, dict[str, Any]]]) -> None:
    first, second = Session(ONCE), Session(ONCE)
    for kind, payload in events:
        first.send(kind, payload)
        second.send(kind, payload)
    assert [e.to_wire() for e in first.log] == [e.to_wire() for e in second.log]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=15),
    st.lists(st.booleans(), min_size=15, max_size=15),
)
def test_a_once_latch_fires_once_per_session_whatever_the_order_and_redeliveries(
    order: list[int], stale: list[bool]
) -> None:
    s = Session(ONCE)
    views = [s.state]
    for step, event_no in enumerate(order):
        event = runtime("user_turn", {"text": "x"}, 1, f"u-{event_no}")
        # a redelivery, or a replica evaluating against an older view
        view = views[0] if stale[step] else s.state
        s.evaluate(event, view)
        views.append(s.state)
    fired = [
        e.payload for e in s.log if isinstance(e.payload, ProviderEvaluated) and e.payload.fired
    ]
    assert len(fired) == 1
    assert len(s.live()) == 1
