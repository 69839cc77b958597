"""Sizes in bytes as stored, and the size invariant of SPEC §4.1.1.

Every event, every reply and every projected state must fit in the server's `max_payload`
whatever sequence of accepted commands led there. Two things guarantee it:

- the rules bound what a session holds in bytes (`CoreConfig.max_session_bytes` for live plus
  queued reminders, `max_envelope_bytes` for an envelope, `max_user_text_bytes` for a
  render's `user_text`; and, in the fold, `FULL_ENVELOPE_TEXT_BYTES` of delivered text kept
  in full and `RECENT_REPLIES_BYTES` of remembered replies), and `worst_case` computes from
  them how large an event, a reply and a state can get; `check_fits` refuses, at start-up, a
  combination whose worst case exceeds `max_payload` less `HEADER_ALLOWANCE_BYTES` (the
  server counts a message's headers toward `max_payload`);
- `decide` measures what it is about to emit (each event, the reply, the state after the
  command) and answers `too_large` instead of emitting anything that would not fit: that
  covers what only a long history grows (the ids in `seen_ids`, `revoked_ids`,
  `fired_ids`, `inherited_from`, the `acknowledged` outcomes and the digests of old
  envelopes) and any combination `worst_case`
  cannot see, such as a `handoff` or an `inherit` with more than a payload's worth of specs.

"Stored bytes" of a text is the UTF-8 length of its JSON string without the quotes, the form
the log and the KV store hold: ordinary text counts its UTF-8 bytes, a quote, a backslash or
a newline counts 2, another control character 6. The body bound of §2.1 and the `user_text`
bound stay in plain UTF-8 bytes; the bounds that add up in a stored value (the session's
reminders, the envelope, the delivered history, the remembered replies) count stored bytes,
so the worst case holds for any text.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Generic, TypeVar

from contracts.errors import ErrorCode, ReminderError
from contracts.spec import MAX_WIRE_INT, ResolvedSpec
from contracts.state import (
    FULL_ENVELOPE_TEXT_BYTES,
    RECENT_REPLIES_BYTES,
    RECENT_REPLIES_KEPT,
    DeliveredDigest,
)
from core.config import CoreConfig

#: What a message's headers may take of the server's `max_payload`, which counts headers
#: and body together: an event's atomic-batch, expectation and message-id headers and its
#: session index (`contracts.session_index.MAX_HEADER_BYTES`), a state's compare-and-set
#: header, and the trace context carried on (which the services cut
#: to `TRACE_HEADERS_MAX_BYTES`, a caller's `baggage` and `tracestate` being theirs to size).
HEADER_ALLOWANCE_BYTES = 8192
#: The most trace-context headers (`traceparent`, `tracestate`, `baggage`) a service
#: carries onto what it publishes; past it only `traceparent` is carried.
TRACE_HEADERS_MAX_BYTES = 4096

#: Stored bytes per character at most: a control character is escaped as `\\u00XX`.
ESCAPED_CHAR_BYTES = 6
#: Stored bytes per character at most in an identifier (no control characters): 4-byte UTF-8.
ID_CHAR_BYTES = 4


#: Texts up to this many characters have their stored size remembered (`stored_bytes`);
#: longer ones (bodies, envelope texts) are measured once per object that holds them
#: (`MeasuredOnce`), so no table keeps a long text alive after every state let it go.
MEMO_TEXT_CHARS = 256


def stored_bytes(text: str) -> int:
    """UTF-8 length of `text` as a JSON string, without its quotes."""
    if len(text) <= MEMO_TEXT_CHARS:
        return _short_stored_bytes(text)
    return _measure_text(text)


@lru_cache(maxsize=8192)
def _short_stored_bytes(text: str) -> int:
    return _measure_text(text)


def _measure_text(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2


Measured = TypeVar("Measured")
Result = TypeVar("Result")


class KeptOnce(Generic[Measured, Result]):
    """What is worked out from frozen objects shared between states (specs, delivered rows,
    remembered replies), once per object and remembered by identity. Only a weak reference
    is held: an entry goes when its object does, so the table never keeps alive what every
    state has dropped (a table of strong references held up to 65,536 rows)."""

    def __init__(self, work_out: Callable[[Measured], Result]) -> None:
        self._work_out = work_out
        #: id of a live object → (a weak reference to it, what was worked out from it).
        self.table: dict[int, tuple[weakref.ref[Measured], Result]] = {}

    def __call__(self, item: Measured) -> Result:
        """What `item` gives, worked out on first sight."""
        key = id(item)
        cached = self.table.get(key)
        # An entry outlives no object (its callback runs before the object's memory can be
        # reused), so an entry under a live object's id is that object's.
        if cached is not None:
            return cached[1]
        result = self._work_out(item)
        self.put(item, result)
        return result

    def known(self, item: Measured) -> Result | None:
        """What `item` gave if it was worked out already; None otherwise (nothing worked out)."""
        cached = self.table.get(id(item))
        return None if cached is None else cached[1]

    def take(self, item: Measured) -> Result | None:
        """What `item` gave, if known, no longer kept for it: for a result its taker goes on
        to change (`item` works it out again if asked)."""
        cached = self.table.pop(id(item), None)
        return None if cached is None else cached[1]

    def put(self, item: Measured, result: Result) -> None:
        """Remember `result` for `item` (worked out elsewhere) while `item` lives."""
        key = id(item)
        self.table[key] = (weakref.ref(item, partial(self._forget, key)), result)

    def many(self, items: Sequence[Measured]) -> list[Result]:
        """What each of `items` gives, in order: one lookup per item, and `__call__` for
        those not known yet (of a state's rows, at most the newest)."""
        get = self.table.get
        known = [get(id(item)) for item in items]
        if None in known:
            return [
                self(item) if entry is None else entry[1]
                for item, entry in zip(items, known, strict=True)
            ]
        return [entry[1] for entry in known]  # type: ignore[index]

    def _forget(self, key: int, ref: weakref.ref[Measured]) -> None:
        """The object behind `ref` is gone: drop its entry (unless its id was reused since)."""
        cached = self.table.get(key)
        if cached is not None and cached[0] is ref:
            del self.table[key]


class MeasuredOnce(KeptOnce[Measured, int]):
    """A size of frozen objects shared between states, measured once per object."""


def json_bytes(value: Any) -> int:
    """UTF-8 length of `value` as canonical JSON."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8"))


#: A delivered digest's stored size apart from its directive ids, with the comma after it:
#: its keys, the text's SHA-256 and the largest turn number.
DIGEST_BYTES = (
    json_bytes(
        DeliveredDigest(
            turn_number=MAX_WIRE_INT, directive_ids=[], text_sha256="0" * 64
        ).model_dump(mode="json")
    )
    + 1
)


def digest_bytes(row: DeliveredDigest) -> int:
    """An upper bound of a delivered digest's stored size with its comma: `DIGEST_BYTES` and
    each directive id with its quotes and a comma."""
    return DIGEST_BYTES + sum(stored_bytes(item) + 3 for item in row.directive_ids)


def _skeleton_bytes() -> int:
    """A spec's stored size apart from its strings: longest literals, largest integers."""
    spec = ResolvedSpec.model_construct(
        body="",
        tags=[],
        dedupe_key="",
        ttl_turns=MAX_WIRE_INT,
        preserve_on_compact=False,
        propagate="session",
        authority="corrective",
        role_hint="ephemeral_cache",
        source="stdlib_provider",
        id="",
        fired_at_turn=MAX_WIRE_INT,
        originating_agent_id="",
        not_before="2026-11-29T15:04:05.123Z",
        expires_at="2026-11-29T15:04:05.123Z",
    )
    return json_bytes(spec.model_dump(mode="json"))


SPEC_SKELETON_BYTES = _skeleton_bytes()


def spec_bytes(spec: ResolvedSpec) -> int:
    """An upper bound of the stored size of a spec (its canonical JSON), cheap to compute:
    measured once per spec object (a session's specs are measured on every inject)."""
    return _SPEC_BYTES(spec)


def _measure_spec(spec: ResolvedSpec) -> int:
    total = SPEC_SKELETON_BYTES + stored_bytes(spec.body) + stored_bytes(spec.id)
    total += stored_bytes(spec.dedupe_key or "") + stored_bytes(spec.originating_agent_id or "")
    return total + sum(stored_bytes(tag) + 3 for tag in spec.tags)


_SPEC_BYTES: MeasuredOnce[ResolvedSpec] = MeasuredOnce(_measure_spec)


# --- the worst case (SPEC §4.1.1) -------------------------------------------------------

#: An identifier on the wire (session, agent, task, request, command id): ≤ 256 characters.
_IDENT = 256 * ID_CHAR_BYTES + 2
#: A reminder id: ≤ 128 characters.
_REMINDER_ID = 128 * ID_CHAR_BYTES + 2
#: The event envelope without payload and reply: keys, event id, time, chain, and the
#: session, agent, task, request and command ids at their longest.
_ENVELOPE = 400 + 5 * _IDENT
#: Small reply fields (ok, session_seq, counts, a status, the HARN-RMD-004 warning).
_REPLY_BASE = 1024
#: Fixed state fields: session id, chain head, nonce, counters of every kind, degraded mark,
#: the last recorded time.
_STATE_BASE = 2048 + 64 + _IDENT
#: A render summary apart from its id lists (and a reply's `dropped` rows' keys).
_SUMMARY = 1024
#: An active mute in the state: its id, until_turn and a selector at its longest (a tag
#: and a provider id of 128 characters, a dedupe key of 256, a source).
_MUTE = 200 + _REMINDER_ID + (128 + 128 + 256) * ID_CHAR_BYTES
#: An acknowledged reminder in the state apart from its id: its three outcomes at most.
_ACK = 48
#: A pending or queued row apart from its spec; a delivered row apart from text and ids.
_ROW = 160
#: The providers' trail apart from its marks: its key, three counters and their keys.
_PROVIDERS = 256
#: One provider's mark: its id (≤ 128 characters, which the contract does not keep from
#: being control characters), its three integers and their keys.
_MARK = 128 * ESCAPED_CHAR_BYTES + 2 + 128


@dataclass(frozen=True)
class WorstCase:
    """The largest event, reply and state the rules allow, in stored bytes."""

    event: int
    reply: int
    state: int

    def largest(self) -> int:
        """The largest of the three."""
        return max(self.event, self.reply, self.state)


def worst_case(config: CoreConfig) -> WorstCase:
    """How large an event, a reply and a state can get under `config` (SPEC §4.1.1).

    What only history grows (seen, revoked, fired and inherited ids; acknowledged outcomes;
    digests of old envelopes) and
    the size of a handoff's or inherit's specs are not bounded by a rule: `decide` measures
    those and answers `too_large` (see the module docstring).
    """
    ids = config.max_live * (_REMINDER_ID + 1)
    spec = config.max_session_bytes  # one reminder never exceeds the session's budget
    envelope = config.max_envelope_bytes + 2
    # injected/queued: the spec and the fields copied from it, the drain's reply of ids.
    inject_event = _ENVELOPE + 2 * spec + _REPLY_BASE + ids
    # delivered: the text in the payload and in the reply, with their directive ids, and
    # the summary in both (its id lists name distinct live reminders: at most `ids` bytes).
    summary = _SUMMARY + ids
    delivered_event = (
        _ENVELOPE
        + 2 * (envelope + ids + summary)
        + stored_bytes(config.instructions)
        + 300
        + _REPLY_BASE
    )
    event = max(inject_event, delivered_event)
    user_text = config.max_user_text_bytes * ESCAPED_CHAR_BYTES
    render_reply = _REPLY_BASE + envelope + ids + summary + (user_text + 4 + envelope)
    reply = max(render_reply, _REPLY_BASE + ids)
    live = config.max_session_bytes + config.max_live * _ROW
    delivered = FULL_ENVELOPE_TEXT_BYTES + 64 * _ROW
    replies = RECENT_REPLIES_BYTES + RECENT_REPLIES_KEPT * 32
    mutes = config.max_mutes * _MUTE
    state = _STATE_BASE + live + delivered + replies + mutes
    return WorstCase(event=event, reply=reply, state=state)


def state_upper_bound(
    *,
    live_bytes: int,
    rows: int,
    delivered_text: int,
    delivered_rows: int,
    delivered_ids: int,
    replies: int,
    history_bytes: int,
    inherited: int,
    mutes: int,
    acknowledged: int,
    provider_marks: int,
) -> int:
    """An upper bound of a state's stored size from counts and sizes the caller keeps (cheap
    on the hot path).

    `live_bytes` the pending and queued specs' stored bytes (`rules.session_bytes`) in
    `rows` rows; `delivered_rows` envelopes kept in full, holding `delivered_ids` directive
    ids and `delivered_text` stored bytes of text; `replies` remembered replies (their
    bodies within `RECENT_REPLIES_BYTES`); `history_bytes` what only a long history grows,
    measured (`Scratch.history_bytes`: the seen, revoked, fired and acknowledged ids and
    the digests of older envelopes; a session that lived long holds thousands of them, and
    their measured size, not the longest an id may be, keeps the bound useful for it);
    `inherited` applied handoff ids; `mutes` active mutes; `acknowledged` acknowledged
    reminders (their outcomes: the ids are in `history_bytes`); `provider_marks` providers'
    latches (the providers' trail is always counted, present or not). When it is within
    `max_payload_bytes`, `decide` need not serialise the state to know it fits.
    """
    reminder_id = _REMINDER_ID + 1
    return (
        _STATE_BASE
        + live_bytes
        + rows * _ROW
        + delivered_text
        + delivered_rows * (_ROW + 80)
        + delivered_ids * reminder_id
        + RECENT_REPLIES_BYTES
        + replies * (_IDENT + 32)
        + history_bytes
        + inherited * (_IDENT + 1)
        + mutes * _MUTE
        + acknowledged * _ACK
        + _PROVIDERS
        + provider_marks * _MARK
    )


@lru_cache(maxsize=16)
def replies_always_fit(config: CoreConfig) -> bool:
    """Whether every reply `config` allows fits its `max_payload_bytes`: then `decide` need
    not measure replies (a render's inline text included) one by one."""
    return worst_case(config).reply <= config.max_payload_bytes


def fits(what: str, size: int, limit: int) -> None:
    """The last line of the size invariant (SPEC §4.1.1): never emit what cannot be stored.

    Raises `too_large` when `size` bytes of `what` exceed `limit`."""
    if size > limit:
        raise ReminderError(
            ErrorCode.TOO_LARGE,
            f"the {what} would be {size} bytes; the server's max_payload is {limit}",
            {"limit": limit, "size": size},
        )


def check_fits(config: CoreConfig, max_payload: int) -> str | None:
    """Why `config` could break the size invariant on a server with `max_payload`, in one
    line; None when it cannot (SPEC §4.1.1). The worst cases must leave
    `HEADER_ALLOWANCE_BYTES` of the server's `max_payload` to the headers."""
    if config.max_payload_bytes > max_payload:
        return (
            f"max_payload_bytes {config.max_payload_bytes} exceeds the server's "
            f"max_payload {max_payload}"
        )
    worst = worst_case(config)
    limit = min(config.max_payload_bytes, max_payload - HEADER_ALLOWANCE_BYTES)
    for name, size in (("event", worst.event), ("reply", worst.reply), ("state", worst.state)):
        if size > limit:
            return (
                f"size bounds could break the invariant: a worst-case {name} is {size} bytes, "
                f"a body may take {limit} (max_payload_bytes, and the server's max_payload "
                f"less {HEADER_ALLOWANCE_BYTES} for headers) (lower REMINDERS_MAX_SESSION_BYTES, "
                f"REMINDERS_MAX_ENVELOPE_BYTES, REMINDERS_MAX_USER_TEXT_BYTES or "
                f"REMINDERS_MAX_LIVE)"
            )
    return None
