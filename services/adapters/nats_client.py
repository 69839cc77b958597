"""The nats-py client every process of the service connects with: nats-py's own, with a
header parser that gives exactly what nats-py's gives, for less CPU.

Every message a consumer, a direct get or a KV read receives carries headers (a stored event
keeps the ones it was appended with: its id, the expectation, the atomic batch's; a direct
get adds stream, subject, sequence and time), and nats-py parses them per message in
`Client._parse_header_lines`. Its parser splits the block into lines and each line at its
colon in C, then checks the name for whitespace one character at a time in a Python
generator, which is most of its cost. The parser here is the same steps with that check
done by `str.split` (the same characters count as whitespace: `str.split` and `str.isspace`
share one definition), so its result is the same for any block
(`tests/unit/test_nats_client.py` checks it against nats-py's own parser, whichever version
is installed). The measurement is in `docs/scaling.md`.
"""

from __future__ import annotations

from nats.aio.client import Client

_CRLF = b"\r\n"


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """A NATS header block (`Name: Value` per CRLF-ended line) as nats-py parses it: lines
    without a colon, names that are not ASCII or hold whitespace are skipped; names and
    values are stripped; values decoded as UTF-8 with errors replaced; the last of a
    repeated name wins."""
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        # A name with whitespace in it splits into other words than itself (an empty name
        # holds none, and nats-py keeps it).
        if key and key.split() != [key]:
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out


class LedgerClient(Client):
    """nats-py's `Client`, parsing message headers with `parse_header_lines`."""

    _parse_header_lines = staticmethod(parse_header_lines)
