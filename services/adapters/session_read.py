"""Reading one session back: its stored events in order, with direct gets only —
no consumer is made, so a reader needs no right to create one."""

from __future__ import annotations

import asyncio
import base64
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from contracts.stored import StoredEvent
from contracts.subjects import (
    session_subject_filter,
    session_token,
)
from services.adapters.jetstream import JetStreamApiError
from services.adapters.session_walk import (
    BrokenChain,
    ChainWalk,
    Walked,
    Walker,
    link_below,
    walk_index,
    walk_session,
)

#: How long one attempt at a read by direct gets may take. Any replica answers a direct get,
#: in milliseconds; one unanswered this long most likely went to a replica that froze (a
#: paused node, or one cut off without a reset, keeps its place among the responders until
#: its routes are dropped), so the caller tries again — another replica answers — instead
#: of spending its whole deadline on it.
READ_ATTEMPT_S = 1.5


@dataclass(frozen=True)
class RawStored:
    """One stored message as a direct get returned it, with how many matching ones follow."""

    data: bytes
    stream_seq: int
    subject: str
    pending: int
    #: A key-value bucket's `KV-Operation` header (`DEL`, `PURGE`: the marker of a deleted or
    #: purged key); None for a value, and for any message of another stream.
    kv_operation: str | None = None


class _Arrivals:
    """A batch's replies as its subscription's callback hands them over: waiting only when
    none is there, rather than with a timer for every message as `next_msg` does, which
    costs a task and a timer per message of a whole-stream read."""

    def __init__(self) -> None:
        self._messages: deque[Msg] = deque()
        self._arrived = asyncio.Event()

    async def put(self, message: Msg) -> None:
        """The subscription's callback."""
        self._messages.append(message)
        self._arrived.set()

    async def get(self, timeout_s: float) -> Msg:
        """The next reply; `NatsTimeoutError` when none comes for `timeout_s`."""
        while not self._messages:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout_s)
            except TimeoutError:
                raise NatsTimeoutError from None
        return self._messages.popleft()


async def iterate_direct(
    nc: Client,
    stream: str,
    subject_filter: str,
    after_seq: int = 0,
    batch: int = 512,
    timeout_s: float = 5.0,
    max_bytes: int | None = None,
    stall_retries: int = 0,
    whole_stream: bool = False,
) -> AsyncIterator[RawStored]:
    """Every stored message matching `subject_filter` after `after_seq`, in order, read with
    batched direct gets (of at most `batch` messages, and about `max_bytes` when given).

    `whole_stream`: the stream holds only subjects under `subject_filter` (a `prefix.>`
    filter), so every message is asked for (`>`) and any outside it dropped here: before a
    filtered batch's first reply the server counts what matches after it, tens of ms.

    A batch that stops for `timeout_s` raises `nats.errors.TimeoutError`, or, up to
    `stall_retries` times in all, is asked for again from the first message not yet read
    (any replica may answer a direct get, and the one that answered may have frozen or
    gone): for a reader of the whole stream, which has no deadline of its own.

    No consumer is made, so a reader needs no right to create one (a reader that may create
    consumers may also make the server deliver to any subject it names). The server sends
    only the matching messages, but to find them it steps over every message stored between
    the first and the last of them (`session_messages` reads a session without that).
    """
    next_seq = after_seq + 1
    if whole_stream and not subject_filter.endswith(">"):
        raise ValueError(f"whole_stream needs a `prefix.>` filter, not {subject_filter!r}")
    asked_filter, prefix = (">", subject_filter[:-1]) if whole_stream else (subject_filter, None)
    while True:
        inbox = nc.new_inbox()
        arrived = _Arrivals()
        subscription = await nc.subscribe(inbox, cb=arrived.put)
        more = False
        try:
            request: dict[str, Any] = {"next_by_subj": asked_filter, "seq": next_seq}
            request["batch"] = batch
            if max_bytes is not None:
                request["max_bytes"] = max_bytes
            await nc.publish(f"$JS.API.DIRECT.GET.{stream}", orjson.dumps(request), reply=inbox)
            while True:
                try:
                    message = await arrived.get(timeout_s)
                except NatsTimeoutError:
                    if stall_retries <= 0:
                        raise
                    stall_retries -= 1
                    more = True
                    break
                headers = message.headers or {}
                status = headers.get("Status")
                if status == "404":
                    return
                if status == "204":
                    more = int(headers.get("Nats-Num-Pending", "0")) > 0
                    break
                if status:
                    raise JetStreamApiError(
                        {"code": int(status), "description": headers.get("Description", "")}
                    )
                stream_seq = int(headers["Nats-Sequence"])
                subject = headers["Nats-Subject"]
                if prefix is None or subject.startswith(prefix):
                    pending = int(headers.get("Nats-Num-Pending", "0"))
                    operation = headers.get("KV-Operation")
                    yield RawStored(message.data, stream_seq, subject, pending, operation)
                next_seq = stream_seq + 1
        finally:
            await subscription.unsubscribe()
        if not more:
            return


#: Foreign messages a subject-filtered scan may step over before a session read follows its
#: back-pointers instead (see `session_messages`).
SCAN_SKIP_LIMIT = 20_000


async def session_messages(
    nc: Client,
    stream: str,
    session_id: str,
    after_seq: int = 0,
    batch: int = 512,
    timeout_s: float = 5.0,
) -> tuple[list[RawStored], int]:
    """One session's stored messages after `after_seq`, in order, and how many the server sent.

    A subject-filtered read makes the server step over every message stored between two of
    the session's events (a file block holds too many subjects for its subject index to
    help), so its cost grows with the stream the session is spread over. A whole session in
    a large stream is read by sequence instead — through the index its last message carries
    (`walk_index`), else along its back-pointers (`walk_session`) — and kept only when it is
    exactly as many messages of the session as the server counts; otherwise, and for a read
    after `after_seq` (the new events of a session already read), the scan.
    """
    subject_filter = session_subject_filter(session_id)
    sent = 0
    try:
        state = await _session_state(nc, stream, subject_filter, timeout_s)
    except NoRespondersError:
        state = None  # the scan reports it as it always did
    if state is not None and not state[0]:
        return [], 0
    if after_seq == 0 and state is not None:
        subjects, stream_messages = state
        count = sum(subjects.values())
        if stream_messages - count > SCAN_SKIP_LIMIT:
            walkers: tuple[Walker, ...] = (walk_index, walk_session)
            for walker in walkers:
                try:
                    async with ChainWalk(nc, stream, timeout_s) as walk:
                        try:
                            found = await walker(walk, session_id, subjects)
                            if found is not None:
                                return _in_order(found, count), sent + walk.sent
                        finally:
                            sent += walk.sent
                except BrokenChain:
                    pass
    messages = [
        raw async for raw in iterate_direct(nc, stream, subject_filter, after_seq, batch, timeout_s)
    ]
    return messages, sent + len(messages)


async def session_tail(
    nc: Client, stream: str, session_id: str, after_seq: int, timeout_s: float = 5.0
) -> tuple[list[RawStored], int] | None:
    """One session's stored messages after `after_seq`, in order, and how many messages of
    the session the stream holds in all (None when the server will not say). What a reader
    that already folded the session up to `after_seq` needs to continue it and to check that
    it did: the scan steps over the stream's messages after `after_seq` only."""
    subject_filter = session_subject_filter(session_id)
    state = await _session_state(nc, stream, subject_filter, timeout_s)
    if state is None:
        return None
    messages = [
        raw async for raw in iterate_direct(nc, stream, subject_filter, after_seq, 512, timeout_s)
    ]
    return messages, sum(state[0].values())


async def _session_state(
    nc: Client, stream: str, subject_filter: str, timeout_s: float
) -> tuple[dict[str, int], int] | None:
    """(messages per subject matching the filter, messages in the stream), or None when the
    server will not say (no right to ask, no such stream): the caller then scans, which says
    why."""
    request = orjson.dumps({"subjects_filter": subject_filter})
    reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", request, timeout=timeout_s)
    answer = orjson.loads(reply.data)
    if not isinstance(answer, dict) or "error" in answer:
        return None
    state = answer.get("state") or {}
    subjects = state.get("subjects") or {}
    return {str(k): int(n) for k, n in subjects.items()}, int(state.get("messages", 0))


def _in_order(found: dict[int, Walked], count: int) -> list[RawStored]:
    """The walked messages in stream order, if they are as many as the server counts: then,
    all of them on the session's subjects and at distinct seqs, they are the whole session,
    whatever the back-pointers said."""
    if len(found) != count:
        raise BrokenChain(f"found {len(found)} of {count}")
    seqs = sorted(found)
    return [
        RawStored(
            found[seq][0],
            seq,
            found[seq][1],
            count - index - 1,
        )
        for index, seq in enumerate(seqs)
    ]


async def read_session(
    nc: Client,
    stream: str,
    session_id: str,
    after_seq: int = 0,
    batch: int = 512,
    timeout_s: float = 5.0,
) -> list[StoredEvent]:
    """Every stored event of one session after `after_seq`, in order (`session_messages`).

    Decode each with `contracts.decode.decode(stored.envelope)`; a body that is not a JSON
    object raises `contracts.decode.DecodeError` here.
    """
    messages, _ = await session_messages(nc, stream, session_id, after_seq, batch, timeout_s)
    return [StoredEvent.from_bytes(raw.data, raw.stream_seq, raw.subject) for raw in messages]


#: A read of a session's last stream seq: (connection, stream, session id, timeout) → seq.
LastSessionSeq = Callable[[Client, str, str, float], Awaitable[int]]


async def last_session_seq(nc: Client, stream: str, session_id: str, timeout_s: float = 5.0) -> int:
    """Stream sequence of the session's last event (0 when it has none): one direct get."""
    request = {"last_by_subj": session_subject_filter(session_id)}
    reply = await nc.request(
        f"$JS.API.DIRECT.GET.{stream}", orjson.dumps(request), timeout=timeout_s
    )
    headers = reply.headers or {}
    if headers.get("Status") == "404":
        return 0
    if headers.get("Status"):
        raise JetStreamApiError(
            {"code": int(headers["Status"]), "description": headers.get("Description", "")}
        )
    return int(headers["Nats-Sequence"])


async def _leader_get(
    nc: Client, stream: str, request: dict[str, Any], timeout_s: float
) -> dict[str, Any] | None:
    """The message a `STREAM.MSG.GET` finds (None for none), as the stream's leader has it:
    the get waits in the server's JetStream API queue where a direct get does not, but is
    never answered by a replica still catching up after a partition heals or a node restarts
    (which would name an older message, or none for one it has yet to get)."""
    reply = await nc.request(
        f"$JS.API.STREAM.MSG.GET.{stream}", orjson.dumps(request), timeout=timeout_s
    )
    answer: dict[str, Any] = orjson.loads(reply.data)
    error = answer.get("error")
    if error is not None:
        if int(error.get("code", 0)) == 404:  # no message matches
            return None
        raise JetStreamApiError(error)
    message: dict[str, Any] = answer["message"]
    return message


async def _leader_seq(
    nc: Client, stream: str, request: dict[str, Any], timeout_s: float
) -> int | None:
    """The stream seq of the message the leader finds (`_leader_get`; None for none)."""
    message = await _leader_get(nc, stream, request, timeout_s)
    return None if message is None else int(message["seq"])


async def leader_last_session_seq(
    nc: Client, stream: str, session_id: str, timeout_s: float = 5.0
) -> int:
    """Stream sequence of the session's last event (0 when it has none), from the leader."""
    request = {"last_by_subj": session_subject_filter(session_id)}
    return await _leader_seq(nc, stream, request, timeout_s) or 0


def trusted_last_session_seq(replicas: int) -> LastSessionSeq:
    """The read of a session's last seq that every replica of the stream agrees with: the
    leader's on a replicated stream (a direct get may be answered by a replica that lags),
    the direct get on one replica (it is the leader)."""
    return leader_last_session_seq if replicas > 1 else last_session_seq


async def leader_first_after(
    nc: Client, stream: str, subject_filter: str, after_seq: int, timeout_s: float = 5.0
) -> int | None:
    """Stream sequence of the first message on `subject_filter` after `after_seq` (None when
    there is none), from the leader."""
    request = {"next_by_subj": subject_filter, "seq": after_seq + 1}
    return await _leader_seq(nc, stream, request, timeout_s)


async def leader_messages_between(
    nc: Client,
    stream: str,
    subject_filter: str,
    after_seq: int,
    before_seq: int,
    limit: int,
    timeout_s: float = 5.0,
) -> list[RawStored]:
    """The messages on `subject_filter` stored after `after_seq` and before `before_seq`, in
    order, at most `limit`, from the leader (one `STREAM.MSG.GET` each: for a few messages
    that a reader must not take from a replica behind)."""
    found: list[RawStored] = []
    cursor = after_seq
    while len(found) < limit:
        request = {"next_by_subj": subject_filter, "seq": cursor + 1}
        message = await _leader_get(nc, stream, request, timeout_s)
        if message is None or int(message["seq"]) >= before_seq:
            break
        cursor = int(message["seq"])
        data = base64.b64decode(message.get("data") or b"")
        found.append(RawStored(data, cursor, str(message["subject"]), 0))
    return found


class NotYetStored(Exception):
    """The read came from a replica that has not stored the session's event yet."""


async def stored_reply_at(
    nc: Client, stream: str, session_id: str, session_seq: int, timeout_s: float = 5.0
) -> dict[str, Any] | None:
    """The reply stored on the session's event at `session_seq` (a command's last event
    carries the reply first sent), read back from the session's last event along its links
    (`previous_seq`), one direct get per event after it; None when the session has no such
    event or it carries no reply. Raises `NotYetStored` when the replica that answered ends
    before `session_seq`, and nats-py's errors when a get goes unanswered."""
    subject_filter = session_subject_filter(session_id)
    token = session_token(session_id)
    # The (session_seq, event) of the last message read, and how many were read: the walk
    # holds one event at a time, however far back it goes.
    last: tuple[object, Any] = (None, None)
    read = 0

    async def step(message: Msg) -> None:
        nonlocal last, read
        previous = link_below(message, subject_filter, token)
        event = orjson.loads(message.data)
        at = event.get("session_seq") if isinstance(event, dict) else None
        last, read = (at, event), read + 1
        if isinstance(at, int) and at > session_seq and previous > 0:
            await walk.get({"seq": previous}, step)

    async with ChainWalk(nc, stream, timeout_s) as walk:
        try:
            await walk.round([({"last_by_subj": subject_filter}, step)])
        except BrokenChain:
            return None
    at, event = last
    if not isinstance(at, int) or at > session_seq:
        return None  # not an event, or the session has no event at `session_seq`
    if at < session_seq and read == 1:
        raise NotYetStored(f"the session's last event is {at}, before {session_seq}")
    reply = event.get("reply") if at == session_seq else None
    return reply if isinstance(reply, dict) else None
