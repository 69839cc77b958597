"""JetStream adapter: provisioning, atomic batch appends and per-session reads (SPEC §3).

nats-py has no atomic-batch helper, so batches are built from the `Nats-Batch-*` headers;
expectation headers are sent by name because nats-py has no constant for the `-Subject` one.
Facts this module relies on, measured against nats-server 2.15:
- only the commit message gets a PubAck `{"stream", "seq": <last>, "batch", "count"}`;
- a wrong expectation anywhere fails the whole batch with err_code 10071
  ("wrong last sequence: N"); nothing is stored;
- a `Nats-Msg-Id` already stored fails the whole batch with err_code 10201, so an exact
  retry after a lost PubAck is reported as a failure, not as a duplicate;
- expectations are checked against the stream as it was before the batch, so each session
  carries exactly one expectation, on its first message;
- while a replicated stream elects a new leader (a node died), a commit gets no responders,
  a 503 "JetStream system temporarily unavailable" (10008), an "atomic publish batch is
  incomplete" (10176, the batch's first messages went to the old leader) or no answer at
  all. None of these says anything about the session; `append_failure` sorts them out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import nats
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from contracts.events import Event
from contracts.stored import StoredEvent
from contracts.subjects import (
    AGENT_EVENT_SUBJECTS,
    AUDIT_SUBJECTS,
    DLQ_SUBJECTS,
    EVENT_SUBJECTS,
    event_subject,
    last_token,
    parse_event_subject,
    session_subject_filter,
    session_token,
)
from core.canonical import canonical_bytes
from services.adapters.partitions import partition_stream_config, source_contradictions
from services.adapters.settings import Settings

H_MSG_ID = "Nats-Msg-Id"
H_BATCH_ID = "Nats-Batch-Id"
H_BATCH_SEQ = "Nats-Batch-Sequence"
H_BATCH_COMMIT = "Nats-Batch-Commit"
H_EXPECTED_SEQ = "Nats-Expected-Last-Subject-Sequence"
H_EXPECTED_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"

ERR_WRONG_LAST_SEQUENCE = 10071
ERR_DUPLICATE_MSG_ID = 10201
ERR_CLUSTER_NOT_AVAILABLE = 10008
ERR_STREAM_OFFLINE = 10118
ERR_BATCH_MISSING_SEQ = 10175
ERR_BATCH_INCOMPLETE = 10176
#: Rejections that say the stream could not take the batch just now (an election, a node
#: catching up, a batch split across two leaders): nothing was stored, a retry may succeed.
TRANSIENT_ERR_CODES = frozenset(
    {ERR_CLUSTER_NOT_AVAILABLE, ERR_STREAM_OFFLINE, ERR_BATCH_MISSING_SEQ, ERR_BATCH_INCOMPLETE}
)


class ProvisionError(RuntimeError):
    """A stream, bucket or consumer is missing or contradicts its configuration; the
    message names it and the command that fixes it."""


PROVISION_HINT = "run `reminders provision` (as an admin user)"


class JetStreamApiError(RuntimeError):
    """A JetStream API or publish error, with the server's err_code."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.code = int(error.get("code", 0))
        self.err_code = int(error.get("err_code", 0))
        self.description = str(error.get("description", ""))
        super().__init__(f"{self.code}/{self.err_code}: {self.description}")


def event_stream_config(settings: Settings) -> StreamConfig:
    """`REMINDERS` as SPEC §3.1 says."""
    return StreamConfig(
        name=settings.stream,
        subjects=[EVENT_SUBJECTS],
        storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS,
        num_replicas=settings.replicas,
        allow_atomic=True,
        allow_direct=True,
        deny_delete=True,
        deny_purge=False,
        duplicate_window=120.0,
    )


def side_stream_configs(settings: Settings) -> list[StreamConfig]:
    """`REMINDERS_DLQ` and `REMINDERS_AUDIT`."""
    return [
        StreamConfig(
            name=settings.dlq_stream,
            subjects=[DLQ_SUBJECTS],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            num_replicas=settings.replicas,
            allow_direct=True,
            duplicate_window=120.0,
        ),
        StreamConfig(
            name=settings.audit_stream,
            subjects=[AUDIT_SUBJECTS],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            num_replicas=settings.replicas,
            deny_delete=True,
            allow_direct=True,
            duplicate_window=120.0,
        ),
    ]


def agent_events_stream_config(settings: Settings) -> StreamConfig:
    """`AGENT_EVENTS` (SPEC §9.1): runtime events, file storage, limits retention, max age
    7 days by default, deduplicated on `Nats-Msg-Id` (the runtime event id) for 2 minutes."""
    return StreamConfig(
        name=settings.agent_events_stream,
        subjects=[AGENT_EVENT_SUBJECTS],
        storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS,
        num_replicas=settings.replicas,
        max_age=settings.agent_events_max_age_s,
        allow_direct=True,
        duplicate_window=120.0,
    )


def _contradictions(existing: StreamConfig, wanted: StreamConfig) -> list[str]:
    """Differences that an update cannot or must not fix."""
    problems = []
    if existing.storage != wanted.storage:
        problems.append(f"storage is {_plain(existing.storage)}, wanted {_plain(wanted.storage)}")
    if set(existing.subjects or []) != set(wanted.subjects or []):
        problems.append(f"subjects are {existing.subjects}, wanted {wanted.subjects}")
    if wanted.retention is not None and existing.retention != wanted.retention:
        problems.append(
            f"retention is {_plain(existing.retention)}, wanted {_plain(wanted.retention)}"
        )
    if wanted.sources:
        problems += source_contradictions(existing, wanted)
    return problems


def _plain(value: object) -> str:
    """`file`, not `StorageType.FILE`: the word nats-server's own config uses."""
    return str(getattr(value, "value", value))


def _needs_update(existing: StreamConfig, wanted: StreamConfig) -> bool:
    keys = ("allow_atomic", "allow_direct", "deny_delete", "deny_purge", "num_replicas")
    if any(bool(getattr(existing, key)) != bool(getattr(wanted, key)) for key in keys[:4]):
        return True
    if (existing.num_replicas or 1) != (wanted.num_replicas or 1):
        return True
    if wanted.max_age and abs((existing.max_age or 0) - wanted.max_age) > 1e-3:
        return True
    if not wanted.duplicate_window:
        return False
    return abs((existing.duplicate_window or 0) - wanted.duplicate_window) > 1e-3


async def ensure_stream(js: JetStreamContext, wanted: StreamConfig, *, check: bool = False) -> str:
    """Create the stream, or update it to `wanted`; returns what was done. With `check`,
    change nothing and raise unless it is already as wanted."""
    try:
        info = await js.stream_info(wanted.name or "")
    except NotFoundError:
        if check:
            raise ProvisionError(f"stream {wanted.name} is missing: {PROVISION_HINT}") from None
        await js.add_stream(wanted)
        return "created"
    problems = _contradictions(info.config, wanted)
    if problems:
        raise ProvisionError(
            f"stream {wanted.name} exists with a contradicting config: {'; '.join(problems)}"
        )
    if not _needs_update(info.config, wanted):
        return "unchanged"
    if check:
        raise ProvisionError(f"stream {wanted.name} is out of date: {PROVISION_HINT}")
    try:
        await js.update_stream(wanted)
    except nats.js.errors.APIError as exc:
        raise ProvisionError(f"stream {wanted.name} cannot be updated: {exc.description}") from exc
    return "updated"


async def ensure_bucket(js: JetStreamContext, settings: Settings, *, check: bool = False) -> str:
    """Create the projection bucket `REMINDER_SESSIONS` if it is missing (history 1), with
    direct gets allowed; an older bucket without them is updated to allow them.

    Direct gets are how every reader takes one key's value (`read_last_value`): any server
    of the stream answers one at once, where a `STREAM.MSG.GET` waits in the server's
    JetStream API queue behind every other API call (measured at 50–200 ms per read under
    load, on 2 cores)."""
    stream = f"KV_{settings.kv_bucket}"
    try:
        config = (await js.stream_info(stream)).config
    except nats.js.errors.NotFoundError:
        if check:
            raise ProvisionError(
                f"bucket {settings.kv_bucket} is missing: {PROVISION_HINT}"
            ) from None
        await js.create_key_value(
            KeyValueConfig(
                bucket=settings.kv_bucket,
                history=1,
                storage=StorageType.FILE,
                replicas=settings.replicas,
                description="Reminder Ledger session projections (SPEC §6.3)",
                direct=True,
            )
        )
        return "created"
    if config.allow_direct:
        return "unchanged"
    if check:
        raise ProvisionError(
            f"bucket {settings.kv_bucket} does not allow direct gets: {PROVISION_HINT}"
        )
    config.allow_direct = True
    await js.update_stream(config)
    return "updated"


async def provision(
    js: JetStreamContext, settings: Settings, *, check: bool = False
) -> dict[str, str]:
    """Create or update every stream of SPEC §3.1 and the projection bucket, idempotently.

    With `check` (what services do at start-up) nothing is changed: anything missing or out
    of date raises a `ProvisionError` naming it and `reminders provision`.
    """
    done = {settings.stream: await ensure_stream(js, event_stream_config(settings), check=check)}
    for config in side_stream_configs(settings):
        done[config.name or ""] = await ensure_stream(js, config, check=check)
    if not check:
        # Only the providers service reads AGENT_EVENTS, and it checks it through its own
        # durable consumer; other services have no right to look at that stream.
        agent_events = agent_events_stream_config(settings)
        done[agent_events.name or ""] = await ensure_stream(js, agent_events)
    done[f"KV_{settings.kv_bucket}"] = await ensure_bucket(js, settings, check=check)
    if not check and settings.projector_partitions > 1:
        # The partitioned projectors check the view through their own consumers, like the
        # providers service checks AGENT_EVENTS; with one partition it does not exist at all.
        view = partition_stream_config(settings)
        done[view.name or ""] = await ensure_stream(js, view)
    return done


@dataclass(frozen=True)
class DurableConsumer:
    """A durable consumer a worker needs: created by `reminders provision`, checked by the
    worker at start-up. `config` is the JetStream API's consumer config."""

    stream: str
    config: dict[str, Any]

    @property
    def name(self) -> str:
        """The durable name."""
        return str(self.config["durable_name"])


async def consumer_info(nc: Client, stream: str, durable: str) -> dict[str, Any]:
    """Raw consumer info (config, num_pending, num_ack_pending, delivered, priority groups)."""
    reply = await nc.request(f"$JS.API.CONSUMER.INFO.{stream}.{durable}", b"", timeout=5)
    answer: dict[str, Any] = orjson.loads(reply.data)
    if "error" in answer:
        raise JetStreamApiError(answer["error"])
    return answer


async def ensure_consumer(nc: Client, wanted: DurableConsumer, *, check: bool = False) -> str:
    """Create the durable consumer or update it to `wanted` (an existing durable otherwise
    keeps its old config silently). With `check`, raise unless it is already as wanted."""
    try:
        existing: dict[str, Any] = (await consumer_info(nc, wanted.stream, wanted.name))["config"]
    except JetStreamApiError as exc:
        if exc.code != 404:
            raise
        existing = {}
    drift = sorted(key for key, value in wanted.config.items() if existing.get(key) != value)
    if not drift:
        return "unchanged"
    if check:
        what = "is missing" if not existing else f"differs in {', '.join(drift)}"
        raise ProvisionError(f"consumer {wanted.name} of {wanted.stream} {what}: {PROVISION_HINT}")
    reply = await nc.request(
        f"$JS.API.CONSUMER.CREATE.{wanted.stream}.{wanted.name}",
        orjson.dumps({"stream_name": wanted.stream, "config": wanted.config}),
        timeout=5,
    )
    answer: dict[str, Any] = orjson.loads(reply.data)
    if "error" in answer:
        raise JetStreamApiError(answer["error"])
    return "updated" if existing else "created"


@dataclass(frozen=True)
class SessionAppend:
    """One command's events for one session, with the OCC expectation."""

    session_id: str
    expected_last_seq: int
    events: tuple[Event, ...]
    headers: dict[str, str] = field(default_factory=dict)
    #: The events' wire bytes when the decision already made them (`Decision.encoded`);
    #: empty to have `publish_atomic` encode them.
    encoded: tuple[bytes, ...] = ()


def encode_event(event: Event) -> bytes:
    """Wire bytes of one event: its canonical form (SPEC §3.3.1), `chain` included."""
    return canonical_bytes(event.to_wire())


class AppendFailure(Enum):
    """Why an atomic append did not return a PubAck, as far as the caller can know."""

    #: The expectation failed (err_code 10071): the session moved on. Nothing was stored.
    CONFLICT = "conflict"
    #: The stream could not take it now (no leader, no responders, 5xx). Nothing was stored.
    UNAVAILABLE = "unavailable"
    #: No answer, a cut connection or a duplicate `Nats-Msg-Id`: it may be stored, or may
    #: still land (a leader can commit a proposal it made before it stepped down).
    UNCERTAIN = "uncertain"
    #: Refused for a reason a retry will not change (too large, bad headers). Nothing stored.
    REFUSED = "refused"


def append_failure(exc: BaseException) -> AppendFailure:
    """Classify an exception raised by `publish_atomic`.

    Only a wrong expected sequence is a conflict: a leader election, a timeout or "JetStream
    not available" says nothing about the session, and must not be retried as if it did.
    """
    if isinstance(exc, JetStreamApiError):
        if exc.err_code == ERR_WRONG_LAST_SEQUENCE:
            return AppendFailure.CONFLICT
        if exc.err_code == ERR_DUPLICATE_MSG_ID:
            return AppendFailure.UNCERTAIN
        if exc.err_code in TRANSIENT_ERR_CODES or exc.code >= 500:
            return AppendFailure.UNAVAILABLE
        return AppendFailure.REFUSED
    if isinstance(exc, NoRespondersError):
        return AppendFailure.UNAVAILABLE  # nobody received the commit: the batch cannot land
    return AppendFailure.UNCERTAIN  # timeouts, cut or reconnecting connections


async def publish_atomic(
    nc: Client, appends: Sequence[SessionAppend], batch_id: str, timeout_s: float = 5.0
) -> int:
    """Append several sessions' events as one atomic batch; returns the last stream seq.

    Raises `JetStreamApiError` when the server rejects the batch (nothing was stored), or a
    nats-py error (timeout, no responders, connection trouble); `append_failure` tells which
    of these may have stored it.
    """
    messages: list[tuple[str, bytes, dict[str, str]]] = []
    for append in appends:
        encoded = append.encoded or tuple(encode_event(event) for event in append.events)
        for index, (event, data) in enumerate(zip(append.events, encoded, strict=True)):
            headers = {H_MSG_ID: event.event_id, **append.headers}
            if index == 0:
                headers[H_EXPECTED_SEQ] = str(append.expected_last_seq)
                headers[H_EXPECTED_SUBJECT] = session_subject_filter(append.session_id)
            messages.append((event_subject(event.kind, event.session_id), data, headers))
    if not messages:
        raise ValueError("an atomic batch needs at least one message")
    last = len(messages)
    for position, (subject, data, headers) in enumerate(messages, start=1):
        headers = {**headers, H_BATCH_ID: batch_id, H_BATCH_SEQ: str(position)}
        if position < last:
            await nc.publish(subject, data, headers=headers)
            continue
        headers[H_BATCH_COMMIT] = "1"
        reply = await nc.request(subject, data, timeout=timeout_s, headers=headers)
        ack = orjson.loads(reply.data)
        if "error" in ack:
            raise JetStreamApiError(ack["error"])
        return int(ack["seq"])
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class RawStored:
    """One stored message as a direct get returned it, with how many matching ones follow."""

    data: bytes
    stream_seq: int
    subject: str
    pending: int


async def iterate_direct(
    nc: Client,
    stream: str,
    subject_filter: str,
    after_seq: int = 0,
    batch: int = 512,
    timeout_s: float = 5.0,
) -> AsyncIterator[RawStored]:
    """Every stored message matching `subject_filter` after `after_seq`, in order, read with
    batched direct gets.

    No consumer is made, so a reader needs no right to create one (a reader that may create
    consumers may also make the server deliver to any subject it names). The server sends
    only the matching messages, but to find them it steps over every message stored between
    the first and the last of them (`session_messages` reads a session without that).
    """
    next_seq = after_seq + 1
    while True:
        inbox = nc.new_inbox()
        subscription = await nc.subscribe(inbox)
        more = False
        try:
            request = {"next_by_subj": subject_filter, "seq": next_seq, "batch": batch}
            await nc.publish(f"$JS.API.DIRECT.GET.{stream}", orjson.dumps(request), reply=inbox)
            while True:
                message = await subscription.next_msg(timeout=timeout_s)
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
                yield RawStored(
                    message.data,
                    stream_seq,
                    headers["Nats-Subject"],
                    int(headers.get("Nats-Num-Pending", "0")),
                )
                next_seq = stream_seq + 1
        finally:
            await subscription.unsubscribe()
        if not more:
            return


#: Foreign messages a subject-filtered scan may step over before a session read follows its
#: back-pointers instead (see `session_messages`).
SCAN_SKIP_LIMIT = 20_000
#: Messages each concurrent back-pointer walk covers on average, and how many walks at most.
CHAIN_LANE_LENGTH = 16
CHAIN_MAX_LANES = 256


class _BrokenChain(Exception):
    """The back-pointers do not lead through the whole session: read it by scanning."""


class _NotStored(_BrokenChain):
    """The server has no message for that get."""


class _DirectGetter:
    """Single-message direct gets, many in flight, answered on one inbox subscription."""

    def __init__(self, nc: Client, stream: str, timeout_s: float) -> None:
        self._nc = nc
        self._subject = f"$JS.API.DIRECT.GET.{stream}"
        self._timeout_s = timeout_s
        self._waiting: dict[str, asyncio.Future[Msg]] = {}
        self._prefix = nc.new_inbox()
        self._count = 0
        self._subscription: Subscription | None = None
        self.sent = 0

    async def __aenter__(self) -> _DirectGetter:
        self._subscription = await self._nc.subscribe(f"{self._prefix}.*", cb=self._answer)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._subscription is not None:
            await self._subscription.unsubscribe()
        for future in self._waiting.values():
            future.cancel()

    async def _answer(self, message: Msg) -> None:
        future = self._waiting.pop(message.subject, None)
        if future is not None and not future.done():
            future.set_result(message)

    async def get(self, request: dict[str, Any]) -> Msg:
        """One stored message; a missing one (or any error status) breaks the chain."""
        self._count += 1
        reply = f"{self._prefix}.{self._count}"
        future: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._waiting[reply] = future
        await self._nc.publish(self._subject, orjson.dumps(request), reply=reply)
        try:
            message = await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError:
            self._waiting.pop(reply, None)
            raise nats.errors.TimeoutError from None
        status = (message.headers or {}).get("Status")
        if status == "404":
            raise _NotStored(str(request))
        if status or not message.headers:
            raise _BrokenChain(str(status))
        self.sent += 1
        return message


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
    a large stream is read by sequence instead (`_walk_session`), and kept only when it is
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
            try:
                async with _DirectGetter(nc, stream, timeout_s) as getter:
                    try:
                        found = await _walk_session(getter, session_id, subjects)
                        return _in_order(found, count), getter.sent
                    finally:
                        sent = getter.sent
            except _BrokenChain:
                pass
    messages = [
        raw async for raw in iterate_direct(nc, stream, subject_filter, after_seq, batch, timeout_s)
    ]
    return messages, sent + len(messages)


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


def _previous_seq(seq: int, headers: dict[str, str], subject_filter: str) -> int:
    """Stream seq of the session's event before the one stored at `seq`.

    The first event of an append carries the expectation the server checked when it stored
    it (the session's last seq then, under the session's own filter); an append's other
    events follow it directly, so theirs is the seq just before.
    """
    expected = headers.get(H_EXPECTED_SEQ)
    if expected is not None and headers.get(H_EXPECTED_SUBJECT) == subject_filter:
        return int(expected)
    return seq - 1


async def _walk_session(
    getter: _DirectGetter, session_id: str, subjects: dict[str, int]
) -> dict[int, tuple[Msg, int]]:
    """Each message of the session by seq, with the seq of the one before it, following the
    back-pointers (`_previous_seq`); raises `_BrokenChain` when they do not hold.

    The session's last event and a few anchors spread below it split the chain into walks
    that run concurrently, each down to the anchor below its own. Anchors are looked up by
    the session's busiest literal subject, not its wildcard filter: for a literal subject the
    server skips blocks without it and scans at most one, where a wildcard lookup would scan
    everything up to the next match.
    """
    subject_filter = session_subject_filter(session_id)
    token = session_token(session_id)
    found: dict[int, tuple[Msg, int]] = {}

    def keep(message: Msg) -> int:
        headers = message.headers or {}
        seq, subject = int(headers["Nats-Sequence"]), headers["Nats-Subject"]
        previous = _previous_seq(seq, headers, subject_filter)
        # Pointing up, or off the session: not a chain the server vouched for (a copy of the
        # stream renumbered, a message written some other way).
        if previous >= seq or parse_event_subject(subject) is None or last_token(subject) != token:
            raise _BrokenChain(subject)
        found[seq] = (message, previous)
        return previous

    async def anchor(subject: str, start: int) -> None:
        # None of that subject from there on: the walk below it is longer, that is all.
        with contextlib.suppress(_NotStored):
            keep(await getter.get({"next_by_subj": subject, "seq": start}))

    keep(await getter.get({"last_by_subj": subject_filter}))
    high = max(found)
    lanes = min(CHAIN_MAX_LANES, max(1, sum(subjects.values()) // CHAIN_LANE_LENGTH))
    busiest = max(subjects, key=lambda subject: subjects[subject])
    await asyncio.gather(*(anchor(busiest, 1 + high * n // lanes) for n in range(lanes)))
    order = sorted(found)

    async def walk(floor: int, top: int) -> None:
        previous = found[top][1]
        while previous > floor:
            previous = keep(await getter.get({"seq": previous}))
        if previous != floor:
            raise _BrokenChain(f"the walk from {top} skips {floor}")

    await asyncio.gather(*(walk(f, t) for f, t in zip([0, *order[:-1]], order, strict=True)))
    return found


def _in_order(found: dict[int, tuple[Msg, int]], count: int) -> list[RawStored]:
    """The walked messages in stream order, if they are as many as the server counts: then,
    all of them on the session's subjects and at distinct seqs, they are the whole session,
    whatever the back-pointers said."""
    if len(found) != count:
        raise _BrokenChain(f"found {len(found)} of {count}")
    seqs = sorted(found)
    return [
        RawStored(
            found[seq][0].data,
            seq,
            (found[seq][0].headers or {})["Nats-Subject"],
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
