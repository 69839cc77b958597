"""The atomic append (SPEC §3.4): several sessions' events as one JetStream atomic batch, each
session with its optimistic-concurrency expectation, and what each way it can fail means.

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
  all. None of these says anything about the session; `append_errors` sorts them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from nats.aio.client import Client

from contracts.events import Event
from contracts.session_index import H_SESSION_INDEX, SessionIndex
from contracts.subjects import event_subject, session_subject_filter
from core.canonical import canonical_bytes
from services.adapters import stages
from services.adapters.jetstream import (
    H_EXPECTED_SEQ,
    H_EXPECTED_SUBJECT,
    H_MSG_ID,
    BatchMessage,
    send_atomic_batch,
)


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
    #: Where the session's earlier appends are, carried on the last message
    #: (`contracts.session_index`); None writes no index (the writer does not know it).
    index: SessionIndex | None = None

    def stored(self, last_seq: int) -> SessionIndex | None:
        """The session's index once this append is stored with its last event at
        `last_seq` (None when this append carries none, or past the index's depth)."""
        if self.index is None:
            return None
        return self.index.after(last_seq - len(self.events) + 1, len(self.events))


def encode_event(event: Event) -> bytes:
    """Wire bytes of one event: its canonical form (SPEC §3.3.1), `chain` included."""
    return canonical_bytes(event.to_wire())


async def publish_atomic(
    nc: Client, appends: Sequence[SessionAppend], batch_id: str, timeout_s: float = 5.0
) -> int:
    """Append several sessions' events as one atomic batch; returns the last stream seq.

    Raises `JetStreamApiError` when the server rejects the batch (nothing was stored), or a
    nats-py error (timeout, no responders, connection trouble); `append_failure` (in
    `append_errors`) tells which
    of these may have stored it.
    """
    profile = stages.PROFILE
    since = 0.0 if profile is None else profile.now()
    messages: list[BatchMessage] = []
    for append in appends:
        encoded = append.encoded or tuple(encode_event(event) for event in append.events)
        last = len(append.events) - 1
        for index, (event, data) in enumerate(zip(append.events, encoded, strict=True)):
            headers = {H_MSG_ID: event.event_id, **append.headers}
            if index == 0:
                headers[H_EXPECTED_SEQ] = str(append.expected_last_seq)
                headers[H_EXPECTED_SUBJECT] = session_subject_filter(append.session_id)
            if index == last and append.index is not None:
                headers[H_SESSION_INDEX] = append.index.header(len(append.events))
            messages.append((event_subject(event.kind, event.session_id), data, headers))

    def sent() -> None:
        # Every message but the commit into the client's buffer (a publish does not wait);
        # the commit is a request, which does.
        if profile is not None:
            profile.add("batch_publish", since)
            profile.count("batches")

    return await send_atomic_batch(nc, messages, batch_id, timeout_s, sent)
