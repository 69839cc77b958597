"""The msgspec mirror of `bench.decode_floor` does the contract's work: it accepts every
event of a small benchmark log and refuses each broken copy the pydantic models refuse, so
the figures compare like with like (and a change to the models that the mirror misses
fails here, not in a quoted figure)."""

from __future__ import annotations

import orjson

from bench.decode_floor import BROKEN, check_agreement, validated_then_constructed
from bench.fold_profile import build_log
from contracts.events import Event


def test_the_mirror_accepts_the_log_and_refuses_what_the_models_refuse() -> None:
    envelopes = [orjson.loads(message[1]) for message in build_log(20, 4.6, 10)]
    assert {envelope["kind"] for envelope in envelopes} == {
        "injected",
        "deduped",
        "fired",
        "delivered",
        "post_turn",
    }
    assert check_agreement(envelopes) == [name for name, _, _ in BROKEN]


def test_an_event_validated_by_the_mirror_then_constructed_is_the_validated_event() -> None:
    for message in build_log(5, 4.6, 5):
        envelope = orjson.loads(message[1])
        built = validated_then_constructed(envelope)
        assert built == Event.model_validate(envelope)
        assert built.to_wire() == envelope
