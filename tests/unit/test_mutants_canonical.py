"""`core.canonical`'s UUIDv7 text (RFC 9562): what mutation testing of `core/canonical.py`
showed no other unit test pins down (docs/mutation-survivors-final-s19.md)."""

from __future__ import annotations

from core.canonical import uuid7_text


def test_uuid7_text_takes_only_the_first_ten_bytes_of_its_random_bits() -> None:
    # Bytes a0..a9 give the random part: the top 12 bits (a0a) after the version nibble,
    # the low 62 (a2a3... with the variant's top bits 10) after it. Bytes past the tenth
    # change nothing, however many a caller passes.
    expected = "01234567-89ab-7a0a-a2a3-a4a5a6a7a8a9"
    ten = bytes(range(0xA0, 0xAA))
    assert uuid7_text(0x0123_4567_89AB, ten) == expected
    assert uuid7_text(0x0123_4567_89AB, ten + b"\xff" * 6) == expected
    assert uuid7_text(0x0123_4567_89AB, ten + bytes(range(0xB0, 0xC0))) == expected
