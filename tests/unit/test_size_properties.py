"""The size invariant (SPEC §4.1.1) as a property of any command sequence: whatever the core
accepted, every event, reply and state fits `max_payload_bytes`, and within the worst case
`core.size` works out for a configuration that fits at all. Sequences are those of
`test_properties`, with big bodies, tags and user texts mixed in.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import CoreConfig, canonical_json
from core.size import HEADER_ALLOWANCE_BYTES, check_fits, worst_case
from tests.unit.test_properties import (
    DEDUPE_KEYS,
    MODES,
    STEPS,
    TAGS,
    Script,
    Step,
    _op,
    canonical_state,
    run,
    show,
)

BIG_BODIES = ["B" * 3_000, "\x01" * 2_000, "&<>" * 1_500, "é" * 4_000, "\n" * 5_000]
BIG_SPECS = st.fixed_dictionaries(
    {"body": st.sampled_from(BIG_BODIES)},
    optional={
        "dedupe_key": st.sampled_from(DEDUPE_KEYS),
        "propagate": st.sampled_from(["all", "session"]),
        "tags": st.lists(st.sampled_from(["\x02" * 128, "😀" * 128, *TAGS]), max_size=32),
        "preserve_on_compact": st.booleans(),
    },
)
INJECT_BIG = _op("inject", st.fixed_dictionaries({"reminder": BIG_SPECS}))
INJECT_BIG_QUEUED = _op(
    "inject", st.fixed_dictionaries({"reminder": BIG_SPECS, "mode": st.sampled_from(MODES)})
)
RENDER_BIG = _op(
    "render",
    st.fixed_dictionaries({"user_text": st.sampled_from(["\x03" * 300, "q" * 2_000])}),
    turn=True,
)
SIZE_STEPS = st.one_of(STEPS, INJECT_BIG, INJECT_BIG, INJECT_BIG_QUEUED, RENDER_BIG)
SIZE_CONFIGS = [
    CoreConfig(),
    CoreConfig(max_session_bytes=20_000, max_envelope_bytes=9_000, max_user_text_bytes=1_000),
    CoreConfig(max_payload_bytes=24_000, max_envelope_bytes=8_000, nonce_enabled=True),
    CoreConfig(max_live=3, max_envelope_bytes=700, instructions="Short."),
]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=st.sampled_from(SIZE_CONFIGS),
    steps=st.lists(SIZE_STEPS, min_size=10, max_size=45),
)
def test_every_event_reply_and_state_fits_the_bound_whatever_was_accepted(
    config: CoreConfig, steps: list[Step]
) -> None:
    script = Script(config, steps)
    show(script)
    _, outcomes = run(script)
    limit = config.max_payload_bytes
    fits = check_fits(config, limit + HEADER_ALLOWANCE_BYTES) is None
    worst = worst_case(config) if fits else None
    for outcome in outcomes:
        state = len(canonical_state(outcome.after).encode())
        reply = len(canonical_json(outcome.decision.reply).encode())
        events = [len(canonical_json(e.to_wire()).encode()) for e in outcome.decision.events]
        assert state <= limit and reply <= limit and all(size <= limit for size in events)
        if worst is not None:
            assert state <= worst.state and reply <= worst.reply
            assert all(size <= worst.event for size in events)
