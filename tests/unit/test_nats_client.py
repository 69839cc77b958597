"""The service's nats-py client parses message headers exactly as nats-py does
(`services.adapters.nats_client`), for any header block, against whichever nats-py is
installed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

from services.adapters.nats_client import LedgerClient, parse_header_lines

#: Bytes a header block is made of, weighted towards what makes names and lines awkward.
_AWKWARD = [b" ", b"\t", b"\x0b", b"\x0c", b"\x1c", b"\x1f", b"\x85", b"\xa0", b":", b"\r", b"\n"]
_piece = st.one_of(
    st.sampled_from(_AWKWARD),
    st.binary(max_size=6),
    st.sampled_from([b"Nats-Sequence", b"Status", "é".encode(), b"\xff\xfe", b"\r\n"]),
)
_line = st.lists(_piece, max_size=8).map(b"".join)
_block = st.lists(_line, max_size=8).map(b"\r\n".join)


@given(_block)
def test_any_header_block_parses_as_nats_py_parses_it(raw: bytes) -> None:
    assert parse_header_lines(raw) == Client._parse_header_lines(raw)


def test_a_stored_event_s_headers_parse_as_nats_py_parses_them() -> None:
    raw = (
        b"Nats-Msg-Id: 01a227d8-0965-7c13-a42c-5bb625de3d86\r\n"
        b"Nats-Expected-Last-Subject-Sequence: 460196\r\n"
        b"Nats-Expected-Last-Subject-Sequence-Subject: transcript.reminder.*.s\r\n"
        b"Nats-Batch-Id: b-649\r\nNats-Batch-Sequence: 1\r\nNats-Stream: REMINDERS\r\n"
        b"Nats-Subject: transcript.reminder.post_turn.s\r\nNats-Sequence: 460597\r\n"
        b"Bad Name: skipped\r\nNo colon here\r\n:empty name\r\nX-Value: caf\xc3\xa9 \xff\r\n\r\n"
    )
    parsed = parse_header_lines(raw)
    assert parsed == Client._parse_header_lines(raw)
    assert parsed["Nats-Sequence"] == "460597"
    assert "Bad Name" not in parsed
    assert parsed[""] == "empty name"
    assert parsed["X-Value"] == "café \ufffd"


def test_nats_py_finds_it_where_it_looks_for_its_own() -> None:
    assert LedgerClient()._parse_header_lines is parse_header_lines
