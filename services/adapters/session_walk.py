"""Following a session's own links through a large stream: single-message direct gets, many
in flight, each reply handled as it arrives (`ChainWalk`); the session's last event's index
header (`walk_index`) or its back-pointers from a few anchors (`walk_session`) say what to
get next. `session_read.session_messages` decides when a walk is worth it and checks what
it found against the server's count."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import nats
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from contracts.session_index import H_SESSION_INDEX, ParsedIndex, Run, parse_index
from contracts.subjects import (
    last_token,
    parse_event_subject,
    session_subject_filter,
    session_token,
)
from services.adapters.jetstream import H_EXPECTED_SEQ, H_EXPECTED_SUBJECT

#: Messages each concurrent back-pointer walk covers on average, and how many walks at most.
CHAIN_LANE_LENGTH = 16
CHAIN_MAX_LANES = 256


class BrokenChain(Exception):
    """The back-pointers do not lead through the whole session: read it by scanning."""


class NotStored(BrokenChain):
    """The server has no message for that get."""


#: What a walk does with one stored message a get returned: keep it, maybe send the next get.
OnReply = Callable[[Msg], Awaitable[None]]


class ChainWalk:
    """Single-message direct gets, many in flight on one inbox subscription, each reply handled
    in the subscription's callback, which sends a walk's next get from there. One get per
    event is what a session spread through a large stream costs (the server has no request
    that returns it cheaper); a task awaiting each get under a timer of its own cost the
    reader about as much CPU again as the get.

    Gets go out in rounds (`round`): a round ends when no get sent in it is unanswered, and
    fails when none has been answered for `timeout_s`.
    """

    def __init__(self, nc: Client, stream: str, timeout_s: float) -> None:
        self._nc = nc
        self._subject = f"$JS.API.DIRECT.GET.{stream}"
        self._timeout_s = timeout_s
        self._prefix = nc.new_inbox()
        self._count = 0
        self._waiting: dict[str, tuple[OnReply, bool]] = {}
        self._round: asyncio.Future[None] | None = None
        self._answered = 0
        self._subscription: Subscription | None = None
        self.sent = 0

    async def __aenter__(self) -> ChainWalk:
        self._subscription = await self._nc.subscribe(f"{self._prefix}.*", cb=self._answer)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._waiting.clear()
        if self._round is not None and not self._round.done():
            self._round.cancel()
        if self._subscription is not None:
            await self._subscription.unsubscribe()

    async def get(
        self, request: dict[str, Any], on_reply: OnReply, missing_ok: bool = False
    ) -> None:
        """Send one get; `on_reply` gets the stored message in the subscription's callback.
        No message (404) breaks the chain, unless `missing_ok`; any other status does."""
        self._count += 1
        reply = f"{self._prefix}.{self._count}"
        self._waiting[reply] = (on_reply, missing_ok)
        await self._nc.publish(self._subject, orjson.dumps(request), reply=reply)

    async def round(
        self, requests: Sequence[tuple[dict[str, Any], OnReply]], missing_ok: bool = False
    ) -> None:
        """Send each (request, on_reply) (`get`) and wait until they and every get sent while
        handling their replies are answered; raises what handling a reply raised, or
        `nats.errors.TimeoutError`."""
        done = self._round = asyncio.get_running_loop().create_future()
        for request, on_reply in requests:
            await self.get(request, on_reply, missing_ok)
        if not self._waiting:
            return
        while True:
            answered = self._answered
            try:
                # Shielded: a wait that runs out leaves the round running while replies come.
                await asyncio.wait_for(asyncio.shield(done), self._timeout_s)
                return
            except TimeoutError:
                if self._answered == answered:
                    raise nats.errors.TimeoutError from None

    async def _answer(self, message: Msg) -> None:
        waiting = self._waiting.pop(message.subject, None)
        done = self._round
        if waiting is None or done is None or done.done():
            return
        on_reply, missing_ok = waiting
        self._answered += 1
        try:
            status = (message.headers or {}).get("Status")
            if status == "404":
                if not missing_ok:
                    raise NotStored(message.subject)
            elif status or not message.headers:
                raise BrokenChain(str(status))
            else:
                self.sent += 1
                await on_reply(message)
        except Exception as exc:  # not swallowed: the round's waiter raises it
            done.set_exception(exc)
            return
        if not self._waiting:
            done.set_result(None)


def previous_seq(seq: int, headers: dict[str, str], subject_filter: str) -> int:
    """Stream seq of the session's event before the one stored at `seq`.

    The first event of an append carries the expectation the server checked when it stored
    it (the session's last seq then, under the session's own filter); an append's other
    events follow it directly, so theirs is the seq just before.
    """
    expected = headers.get(H_EXPECTED_SEQ)
    if expected is not None and headers.get(H_EXPECTED_SUBJECT) == subject_filter:
        return int(expected)
    return seq - 1


def on_session(headers: dict[str, str], token: str) -> tuple[int, str]:
    """The stream seq and subject of a direct get's message; raises `BrokenChain` when the
    message is not an event of the session whose subject token is `token`."""
    seq, subject = int(headers["Nats-Sequence"]), headers["Nats-Subject"]
    if parse_event_subject(subject) is None or last_token(subject) != token:
        raise BrokenChain(subject)
    return seq, subject


def link_below(message: Msg, subject_filter: str, token: str) -> int:
    """Stream seq of the session's event before `message` (`previous_seq`); raises
    `BrokenChain` when the link points up or the message is off the session: not a chain
    the server vouched for (a copy of the stream renumbered, a message written some other
    way)."""
    headers = message.headers or {}
    seq, subject = on_session(headers, token)
    previous = previous_seq(seq, headers, subject_filter)
    if previous >= seq:
        raise BrokenChain(subject)
    return previous


#: A walked message as kept: its body, its subject, and the seq of the session's event before.
Walked = tuple[bytes, str, int]


async def walk_session(
    walk: ChainWalk, session_id: str, subjects: dict[str, int]
) -> dict[int, Walked]:
    """Each message of the session by seq, with the seq of the one before it, following the
    back-pointers (`previous_seq`); raises `BrokenChain` when they do not hold.

    The session's last event and a few anchors spread below it split the chain into walks
    that run concurrently, each down to the anchor below its own. Anchors are looked up by
    the session's busiest literal subject, not its wildcard filter: for a literal subject the
    server skips blocks without it and scans at most one, where a wildcard lookup would scan
    everything up to the next match.
    """
    subject_filter = session_subject_filter(session_id)
    token = session_token(session_id)
    # Only what the read returns is kept of each message, not the message and its headers:
    # a long session is held whole until the walk ends.
    found: dict[int, Walked] = {}

    def keep(message: Msg) -> int:
        previous = link_below(message, subject_filter, token)
        headers = message.headers or {}
        found[int(headers["Nats-Sequence"])] = (message.data, headers["Nats-Subject"], previous)
        return previous

    async def kept(message: Msg) -> None:
        keep(message)

    await walk.round([({"last_by_subj": subject_filter}, kept)])
    high = max(found)
    lanes = min(CHAIN_MAX_LANES, max(1, sum(subjects.values()) // CHAIN_LANE_LENGTH))
    busiest = max(subjects, key=lambda subject: subjects[subject])
    # An anchor that finds none of that subject from there on: the walk below is longer.
    anchors = [
        ({"next_by_subj": busiest, "seq": 1 + high * n // lanes}, kept) for n in range(lanes)
    ]
    await walk.round(anchors, missing_ok=True)
    order = sorted(found)

    def down_to(floor: int) -> OnReply:
        async def step(message: Msg) -> None:
            previous = keep(message)
            if previous > floor:
                await walk.get({"seq": previous}, step)
            elif previous != floor:
                raise BrokenChain(f"the walk skips {floor}")

        return step

    walks: list[tuple[dict[str, Any], OnReply]] = []
    for floor, top in zip([0, *order[:-1]], order, strict=True):
        previous = found[top][2]
        if previous > floor:
            walks.append(({"seq": previous}, down_to(floor)))
        elif previous != floor:
            raise BrokenChain(f"the walk from {top} skips {floor}")
    await walk.round(walks)
    return found


async def walk_index(
    walk: ChainWalk, session_id: str, subjects: dict[str, int]
) -> dict[int, Walked] | None:
    """Each message of the session by seq, found through the index header of its last message
    (`contracts.session_index`): the last message, then every message its index names and
    every reference it names expanded, each get sent as soon as the reply that names it
    arrives, so a session of n appends takes about log₁₆ n rounds of gets in all. None when
    the last message carries no index (a session written before there was one); raises
    `BrokenChain` when the index does not lead to messages of the session, or names more
    than the stream holds (`subjects`: its count of the session's messages by subject)."""
    read = _IndexWalk(walk, session_id, sum(subjects.values()))
    await walk.round([({"last_by_subj": session_subject_filter(session_id)}, read.last)])
    return read.found if read.indexed else None


class _IndexWalk:
    """One read of a session through its index (`walk_index`): what was asked for, what
    arrived, and which arrived messages' index levels still wait to be expanded."""

    def __init__(self, walk: ChainWalk, session_id: str, count: int) -> None:
        self._walk = walk
        self._token = session_token(session_id)
        self._count = count
        self.found: dict[int, Walked] = {}
        self.indexed = False
        self._asked: set[int] = set()
        self._indexes: dict[int, str] = {}
        #: Seqs asked for whose index levels are to be expanded once they arrive.
        self._expansions: dict[int, list[int]] = {}

    async def last(self, message: Msg) -> None:
        """The session's last message: its own append's other events, and every level of
        its index."""
        seq = self._keep(message)
        if seq not in self._indexes:
            return
        self.indexed = True
        parsed = self._parsed(seq)
        await self._want_runs([(seq - parsed.count + 1, parsed.count - 1)], seq)
        for depth in range(len(parsed.refs) + 1):
            await self._expand_level(seq, parsed, depth)

    async def _arrived(self, message: Msg) -> None:
        seq = self._keep(message)
        for depth in self._expansions.pop(seq, ()):
            await self._expand_level(seq, self._parsed(seq), depth)

    def _keep(self, message: Msg) -> int:
        headers = message.headers or {}
        seq, subject = on_session(headers, self._token)
        self._asked.add(seq)
        self.found[seq] = (message.data, subject, 0)
        value = headers.get(H_SESSION_INDEX)
        if value is not None:
            self._indexes[seq] = value
        return seq

    def _parsed(self, seq: int) -> ParsedIndex:
        value = self._indexes.get(seq)
        if value is None:
            raise BrokenChain(f"no index at {seq}")
        try:
            return parse_index(value)
        except ValueError as exc:
            raise BrokenChain(f"the index at {seq}: {exc}") from None

    async def _expand_level(self, seq: int, parsed: ParsedIndex, depth: int) -> None:
        """Level `depth` of the index at `seq`: its appends' events at 0, else each message
        it names, whose level `depth - 1` is expanded in turn."""
        if depth == 0:
            await self._want_runs(parsed.runs, seq)
            return
        for ref in parsed.refs_at(depth):
            if ref >= seq:
                raise BrokenChain(f"the index at {seq} names {ref}")
            if ref in self.found:
                await self._expand_level(ref, self._parsed(ref), depth - 1)
                continue
            self._expansions.setdefault(ref, []).append(depth - 1)
            await self._want(ref)

    async def _want_runs(self, runs: Sequence[Run], below: int) -> None:
        for first, n in runs:
            if first < 1 or first + n > below:
                raise BrokenChain(f"the index at {below} names {first}:{n}")
            for seq in range(first, first + n):
                await self._want(seq)

    async def _want(self, seq: int) -> None:
        if seq in self._asked:
            return
        self._asked.add(seq)
        if len(self._asked) > self._count:
            raise BrokenChain(f"the index names more than the {self._count} messages stored")
        await self._walk.get({"seq": seq}, self._arrived)


#: A read of one session by its links: (walk, session id, the stream's count of the session's
#: messages by subject) → each message found by seq, or None when this way does not apply.
Walker = Callable[[ChainWalk, str, dict[str, int]], Awaitable[dict[int, Walked] | None]]
