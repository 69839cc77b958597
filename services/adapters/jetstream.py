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

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import nats
import orjson
from nats.aio.client import Client
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
    session_subject_filter,
)
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
    """Create the projection bucket `REMINDER_SESSIONS` if it is missing (history 1)."""
    try:
        await js.key_value(settings.kv_bucket)
        return "unchanged"
    except nats.js.errors.BucketNotFoundError:
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
            )
        )
        return "created"


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


def encode_event(event: Event) -> bytes:
    """Wire bytes of one event (sorted keys, like the chain's canonical form)."""
    return orjson.dumps(event.to_wire(), option=orjson.OPT_SORT_KEYS)


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
        for index, event in enumerate(append.events):
            headers = {H_MSG_ID: event.event_id, **append.headers}
            if index == 0:
                headers[H_EXPECTED_SEQ] = str(append.expected_last_seq)
                headers[H_EXPECTED_SUBJECT] = session_subject_filter(append.session_id)
            messages.append(
                (event_subject(event.kind, event.session_id), encode_event(event), headers)
            )
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
    consumers may also make the server deliver to any subject it names), and the cost grows
    with the matching messages, not with the stream.
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


async def read_session(
    nc: Client,
    stream: str,
    session_id: str,
    after_seq: int = 0,
    batch: int = 512,
    timeout_s: float = 5.0,
) -> list[StoredEvent]:
    """Every stored event of one session after `after_seq`, in order (`iterate_direct`).

    Decode each with `contracts.decode.decode(stored.envelope)`; a body that is not a JSON
    object raises `contracts.decode.DecodeError` here.
    """
    return [
        StoredEvent.from_bytes(raw.data, raw.stream_seq, raw.subject)
        async for raw in iterate_direct(
            nc, stream, session_subject_filter(session_id), after_seq, batch, timeout_s
        )
    ]


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
