"""`canonical_bytes` writes with orjson for speed; SPEC §3.3.1 defines the canonical form as
the standard library's `json.dumps(obj, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`. These properties hold the two byte-identical on arbitrary values:
any Unicode (surrogates, controls, U+2028, astral keys), integers beyond 64 bits, floats,
non-string keys, tuples."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.canonical import (
    canonical_bytes,
    canonical_json,
    chain_link,
    chain_next,
    linked,
    sha256_hex,
)
from services.adapters.append import encode_event
from tests.support import Driver

#: Every code point, lone surrogates included (hypothesis leaves them out by default).
ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=12)
CONTROL_AND_ODD = st.sampled_from(
    ["\x00", "\x1f", "\x7f", '"', "\\", "/", "\u2028", "\u2029", "\ufeff", "\ud800", "😀", "é"]
)
KEYS = ANY_TEXT | CONTROL_AND_ODD
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | ANY_TEXT
    | CONTROL_AND_ODD
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(KEYS, children, max_size=4)
        | st.dictionaries(st.integers(), children, max_size=2)
    ),
    max_leaves=20,
)


def stdlib(value: Any) -> bytes:
    """The SPEC's definition, encoded."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def outcome(write: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", write(value)
    except (UnicodeEncodeError, TypeError, ValueError) as exc:
        return "error", type(exc).__name__


@settings(max_examples=1500)
@given(VALUES)
def test_canonical_bytes_are_the_standard_librarys_for_any_value(value: Any) -> None:
    assert outcome(canonical_bytes, value) == outcome(stdlib, value)


@settings(max_examples=500)
@given(st.dictionaries(KEYS, SCALARS, max_size=8))
def test_canonical_bytes_agree_on_flat_objects_with_any_keys(value: dict[str, Any]) -> None:
    assert outcome(canonical_bytes, value) == outcome(stdlib, value)


@settings(max_examples=500)
@given(st.dictionaries(KEYS, VALUES, max_size=5), st.sampled_from(["", "0" * 64]))
def test_linked_hashes_and_sends_the_standard_librarys_bytes(
    body: dict[str, Any], previous: str
) -> None:
    body.pop("chain", None)
    try:
        expected_text = stdlib(body)
    except (UnicodeEncodeError, TypeError, ValueError) as exc:
        assert outcome(lambda value: linked(previous, value), body) == (
            "error",
            type(exc).__name__,
        )
        return
    text, link, wire = linked(previous, body)
    assert text == expected_text
    assert link == sha256_hex(previous + "\n" + expected_text.decode("utf-8"))
    assert wire == stdlib({**body, "chain": link})


def test_canonical_bytes_decode_to_canonical_json() -> None:
    value = {"b": [1, "naïve ✓ 😀", None, True], "a": {"\u2028": "\x00"}, "監査": -(2**63)}
    assert canonical_bytes(value).decode("utf-8") == canonical_json(value)


def test_the_chain_link_and_the_wire_bytes_a_decision_makes_are_the_specs() -> None:
    driver = Driver("canon")
    decisions = [
        driver.run("inject", reminder={"body": "naïve ✓ 😀 監査\u2028"}, request_id="r-1"),
        driver.run("inject", reminder={"body": "second", "dedupe_key": "k"}),
        driver.run("inject", reminder={"body": "third", "dedupe_key": "k", "ttl_turns": 1}),
        driver.run("render", turn=0, user_text='quote " and \\ and \x01'),
        driver.run("end_turn", turn=0),
    ]
    assert all(decision.ok for decision in decisions)
    encoded = [data for decision in decisions for data in decision.encoded]
    assert len(encoded) == len(driver.log) > len(decisions)
    previous = ""
    for event, data in zip(driver.log, encoded, strict=True):
        wire = event.to_wire()
        body = {key: value for key, value in wire.items() if key != "chain"}
        expected = sha256_hex(previous + "\n" + canonical_json(body))
        assert chain_link(previous, body) == chain_next(previous, canonical_bytes(body))
        assert chain_link(previous, body) == expected == event.chain
        assert data == encode_event(event) == stdlib(wire)
        previous = event.chain
