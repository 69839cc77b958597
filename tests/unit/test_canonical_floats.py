"""`canonical_bytes` and `may_hold_float` against `canonical_json` (SPEC §3.3.1), floats too."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import canonical
from core.canonical import canonical_bytes, canonical_json, linked, may_hold_float

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def standard(value: Any) -> bytes:
    return canonical_json(value).encode("utf-8")


@settings(max_examples=200)
@given(json_values)
def test_canonical_bytes_are_the_standard_librarys(value: Any) -> None:
    try:
        expected = standard(value)
    except UnicodeEncodeError:  # a lone surrogate: neither writes it
        return
    assert canonical_bytes(value) == expected


@settings(max_examples=200)
@given(json_values)
def test_canonical_bytes_of_what_orjson_parsed_back(value: Any) -> None:
    try:
        wire = orjson.dumps(value)
    except TypeError:  # past 64 bits or a lone surrogate: never on the wire
        return
    parsed = orjson.loads(wire)
    assert canonical_bytes(parsed) == standard(parsed)


def test_floats_and_float_like_text_take_the_standard_path() -> None:
    for value in (
        {"a": 1e16},
        {"a": [1.5, -0.0, 5e-324]},
        {"at": "2026-11-29T15:04:05.123Z", "n": 1},
        {"text": ":1.5,"},
        {"big": 2**70},
    ):
        assert canonical_bytes(value) == standard(value)


@settings(max_examples=300)
@given(st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
def test_every_float_orjson_writes_is_noticed(number: float, text: str) -> None:
    for value in ([number], {"k": number, "t": text}, [text, [number]]):
        assert may_hold_float(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))


def test_a_float_written_with_only_an_exponent_is_noticed() -> None:
    # orjson writes these without a `.`: the `e+` or `e-` after a digit is the only sign.
    for number in (1e16, -1e300, 1e-7, 5e-324):
        written = orjson.dumps({"k": number})
        assert b"." not in written
        assert may_hold_float(written), written


def test_a_float_between_dots_that_are_not_floats_is_noticed() -> None:
    written = orjson.dumps({"a": "x.", "b": 1.5, "c": "y."}, option=orjson.OPT_SORT_KEYS)
    assert may_hold_float(written)
    # A time's milliseconds follow a digit but are no float: the fast path stays open.
    plain = {"a": "x.", "at": "2026-11-29T15:04:05.123Z", "b": 15, "c": "y."}
    assert not may_hold_float(orjson.dumps(plain))


def _where_a_float_may_be(schema: Any, path: str = "") -> list[str]:
    """Where a JSON schema allows a float: a `number` type, or a value of any type."""
    found: list[str] = []
    if isinstance(schema, dict):
        kinds = schema.get("type")
        if kinds == "number" or (isinstance(kinds, list) and "number" in kinds):
            found.append(path)
        if schema.get("additionalProperties") is True:
            found.append(f"{path}/*")
        for key, item in schema.items():
            found += _where_a_float_may_be(item, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            found += _where_a_float_may_be(item, f"{path}/{index}")
    return found


def test_no_event_or_reply_model_holds_a_float() -> None:
    # `Batch.finish` links the events it decided with `linked(..., float_free=True)`: sound
    # only while no field of an event, or of the reply its last one carries, can hold a
    # float. The one open value is the event's `reply`, which is a reply model's wire form.
    from contracts.events import Event
    from contracts.replies import Reply

    assert _where_a_float_may_be(Event.model_json_schema()) == ["/properties/reply/anyOf/0/*"]
    replies, pending = [], [Reply]
    while pending:
        model = pending.pop()
        replies.append(model)
        pending += model.__subclasses__()
    assert len(replies) > 10
    for model in replies:
        assert _where_a_float_may_be(model.model_json_schema()) == [], model.__name__


@settings(max_examples=200)
@given(json_values)
def test_linked_float_free_writes_what_the_standard_library_writes_without_floats(
    value: Any,
) -> None:
    # Without floats (what `float_free` promises), orjson's bytes are the standard
    # library's; what orjson refuses (an integer beyond 64 bits, a lone surrogate) takes the
    # standard path.
    def without_floats(item: Any) -> Any:
        if isinstance(item, float):
            return int(item)
        if isinstance(item, list):
            return [without_floats(element) for element in item]
        if isinstance(item, dict):
            return {key: without_floats(element) for key, element in item.items()}
        return item

    envelope = {"body": without_floats(value), "kind": "injected"}
    try:
        expected = standard(envelope)
    except UnicodeEncodeError:  # a lone surrogate: neither writes it
        return
    hashed, link, wire = linked("", envelope, float_free=True)
    assert hashed == expected
    assert (hashed, link, wire) == linked("", envelope)


def test_linked_float_free_writes_with_orjson_without_walking_or_the_standard_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    envelope = {"kind": "injected", "payload": {"ids": ["a", "b"], "n": 3, "ok": True}}
    expected = linked("prev", envelope)

    def refuse(*_: Any) -> Any:
        raise AssertionError("float_free took the checked path")

    monkeypatch.setattr(canonical, "_orjson_writes_it_as_json_does", refuse)
    monkeypatch.setattr(canonical, "canonical_json", refuse)
    assert linked("prev", envelope, float_free=True) == expected
