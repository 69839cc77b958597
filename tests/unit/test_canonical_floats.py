"""`canonical_bytes` and `may_hold_float` against `canonical_json` (SPEC §3.3.1), floats too."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from core.canonical import canonical_bytes, canonical_json, may_hold_float

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
