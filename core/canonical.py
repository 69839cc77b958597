"""Canonical bytes, the hash chain (SPEC §3.3.1) and derived ids.

Session tokens and subjects (§3.2) live in `contracts.subjects`; re-exported here.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson

from contracts.subjects import event_subject, session_subject_filter, session_token

__all__ = [
    "canonical_bytes",
    "canonical_json",
    "chain_link",
    "chain_next",
    "derived_uuid7",
    "epoch_millis",
    "event_subject",
    "linked",
    "links",
    "may_hold_float",
    "session_subject_filter",
    "session_token",
    "sha256_hex",
    "uuid7_text",
]


def canonical_json(value: Any) -> str:
    """UTF-8 JSON with sorted keys, no insignificant whitespace, non-ASCII unescaped.

    Exactly the SPEC's definition, so an outside auditor can reproduce it with the standard
    library alone.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: The integers orjson writes (64-bit signed or unsigned); a larger one it refuses.
_MIN_INT, _MAX_INT = -(1 << 63), (1 << 64) - 1


def _orjson_writes_it_as_json_does(value: Any) -> bool:
    """Whether orjson's sorted output for `value` is the standard library's, byte for byte.

    They agree on strings (the same escapes: `"`, `\\`, the short forms and `\\u00xx` for
    other control characters, everything else as UTF-8, U+2028 included), on sorted keys
    (code point order is UTF-8 byte order), on `None`, booleans and 64-bit integers. They
    differ on floats (`1e+16` against `1e16`, `NaN` against `null`), on integers beyond 64
    bits and non-string keys (orjson refuses them), on lone surrogates (orjson refuses them)
    and on subclasses and other types (tuples, enums); exact types only, so any of those
    takes the standard library's path. A test compares both on arbitrary values.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(_MIN_INT <= value <= _MAX_INT)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not _orjson_writes_it_as_json_does(item):
                return False
        return True
    if kind is list:
        return all(_orjson_writes_it_as_json_does(item) for item in value)
    return False


def _by_orjson(value: Any, float_free: bool = False) -> bytes | None:
    """`value`'s canonical bytes written by orjson, or None where orjson would differ
    (`float_free`: see `linked`)."""
    if float_free or _orjson_writes_it_as_json_does(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # a lone surrogate: the standard library decides
            pass
    return None


def canonical_bytes(value: Any) -> bytes:
    """`canonical_json(value)` as UTF-8, written by orjson whenever that is byte-identical
    (a fraction of the standard library's time), else by the standard library itself."""
    fast = _by_orjson(value)
    return fast if fast is not None else canonical_json(value).encode("utf-8")


def linked(
    previous_chain: str, envelope_without_chain: dict[str, Any], *, float_free: bool = False
) -> tuple[bytes, str, bytes]:
    """An envelope's link after `previous_chain` (SPEC §3.3.1) with the canonical bytes it
    hashed (the envelope without `chain`: what is measured) and those of the envelope with
    its link (what is sent): `(hashed, link, wire)`.

    `float_free`: the envelope is pydantic's JSON-mode output of models with no float
    anywhere (an event the core decided, with its reply: a unit test holds every event and
    reply model to that). Such output holds only exact strings, integers, booleans, None,
    lists and dicts with string keys, where orjson differs from the standard library only
    on what it refuses (a lone surrogate, an integer beyond 64 bits): so it is written by
    orjson without walking every value first."""
    fast = _by_orjson(envelope_without_chain, float_free)
    text = fast if fast is not None else canonical_json(envelope_without_chain).encode("utf-8")
    link = chain_next(previous_chain, text)
    envelope = {**envelope_without_chain, "chain": link}
    # Adding a hex string keeps a value orjson writes exactly: no second check needed.
    if fast is not None:
        return text, link, orjson.dumps(envelope, option=orjson.OPT_SORT_KEYS)
    return text, link, canonical_bytes(envelope)


#: A number with a fraction or an exponent, as orjson writes one in compact output: after
#: `:`, `,` or `[` and before `,`, `}` or `]`. Text inside a string can match too (that only
#: costs the slow path); a float outside a string always does.
_FLOAT_TOKEN = re.compile(rb"[:,\[]-?[0-9]+(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)[,}\]]")
_DIGITS = frozenset(b"0123456789")


def may_hold_float(data: bytes) -> bool:
    """Whether compact JSON written by orjson may hold a float (where it and
    `canonical_json` can differ); text that looks like one also counts.

    orjson writes a float with a `.` or an exponent (`e+`, `e-`) right after a digit; only
    at those few places is the token itself matched (a regex scan of the whole value cost
    more than writing it).
    """
    for marker in (b".", b"e+", b"e-", b"E"):
        at = data.find(marker)
        while at != -1:
            after_digit = at > 0 and data[at - 1] in _DIGITS
            if after_digit and _FLOAT_TOKEN.search(data, max(0, at - 40), at + 40):
                return True
            at = data.find(marker, at + 1)
    return False


def sha256_hex(text: str) -> str:
    """SHA-256 of the UTF-8 bytes of `text`, lowercase hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chain_link(previous_chain: str, envelope_without_chain: dict[str, Any]) -> str:
    """`sha256_hex(previous_chain + "\\n" + canonical(envelope without "chain"))`."""
    return chain_next(previous_chain, canonical_bytes(envelope_without_chain))


def chain_next(previous_chain: str, canonical: bytes) -> str:
    """The link after `previous_chain` for an envelope whose canonical bytes are given."""
    return hashlib.sha256(previous_chain.encode("utf-8") + b"\n" + canonical).hexdigest()


def epoch_millis(occurred_at: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 timestamp with a `Z` or offset."""
    return int(datetime.fromisoformat(occurred_at.replace("Z", "+00:00")).timestamp() * 1000)


def uuid7_text(millis: int, random_bits: bytes) -> str:
    """The canonical text of the UUIDv7 (RFC 9562) with 48-bit time `millis` and the first
    ten bytes of `random_bits` as its random part (version and variant bits set here)."""
    rand = int.from_bytes(random_bits[:10], "big")
    # Its top 12 bits are `rand_a`, its low 62 `rand_b`: each where `_uuid7` leaves them.
    raw = bytearray(6)
    raw += (rand >> 68 & 0xFFF).to_bytes(2, "big")
    raw += (rand & 0x3FFF_FFFF_FFFF_FFFF).to_bytes(8, "big")
    return _uuid7(millis, raw)


def _uuid7(millis: int, raw: bytearray) -> str:
    """The UUIDv7 text of 16 bytes whose random fields are in place (`rand_a`: the low 12
    bits of bytes 6-7; `rand_b`: the low 62 bits of bytes 8-15): the 48-bit time `millis`
    written over bytes 0-5, version and variant over the high bits of bytes 6 and 8."""
    raw[0:6] = (millis & 0xFFFF_FFFF_FFFF).to_bytes(6, "big")
    raw[6] = 0x70 | raw[6] & 0x0F
    raw[8] = 0x80 | raw[8] & 0x3F
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@lru_cache(maxsize=256)
def _occurred_millis(occurred_at: str) -> int:
    # Every event of a command shares its `occurred_at`: parse it once.
    return epoch_millis(occurred_at)


def derived_uuid7(occurred_at: str, *seed: str) -> str:
    """A UUIDv7 whose time is `occurred_at` and whose random bits are a hash of `seed`.

    Event ids are derived, not drawn, so deciding the same command against the same state
    yields the same ids (and JetStream's duplicate window drops an exact re-send).
    """
    digest = hashlib.sha256("\n".join(seed).encode("utf-8")).digest()
    # The random bits are those the digest's first 16 bytes leave once the time, version
    # and variant are set: bytes 6-7 (low 12 bits) and 8-15 (low 62 bits).
    return _uuid7(_occurred_millis(occurred_at), bytearray(digest[:16]))


def links(previous_chain: str, envelope: dict[str, Any]) -> bool:
    """Whether a raw envelope's `chain` follows `previous_chain` (SPEC §3.3.1)."""
    body = {key: value for key, value in envelope.items() if key != "chain"}
    return envelope.get("chain") == chain_link(previous_chain, body)
