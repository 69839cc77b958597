"""The state check of `Batch` (SPEC §4.1.1): the state a command leaves, as the projector
will store it, must fit `max_payload_bytes`, and the shortcut that skips measuring it may
only skip a state that surely fits (docs/mutation-survivors-final-s19.md)."""

from __future__ import annotations

from typing import Any

import pytest

import core.batch
from contracts.spec import ResolvedSpec, parse_reminder
from contracts.state import (
    FULL_ENVELOPE_TEXT_BYTES,
    RECENT_REPLIES_BYTES,
    DeliveredDigest,
    DeliveredEnvelope,
    ProviderMark,
    ProvidersState,
    QueuedRow,
    RecentReply,
    SessionState,
)
from core import CoreConfig, Decision, fold_all, handle
from core.size import json_bytes, spec_bytes, state_upper_bound
from tests.support import Driver, context_for

#: A reminder id of 128 characters, each 4 bytes of UTF-8: the longest an id can be stored.
LONG_ID_CHAR = "\U0001d538"


def long_id(n: int) -> str:
    """The n-th distinct reminder id of the longest stored size."""
    return f"{n:05d}" + LONG_ID_CHAR * 123


def inject_into(state: SessionState, limit: int, **fields: Any) -> Decision:
    """Decide an inject of a small reminder on `state` with `max_payload_bytes=limit`."""
    raw = {"session_id": state.session_id or "s1", "reminder": {"body": "b"}, **fields}
    config = CoreConfig(max_payload_bytes=limit, max_session_bytes=4096)
    return handle(state, "inject", raw, context_for(900, "n0nce"), config)


def assert_too_large(decision: Decision, what: str, limit: int) -> None:
    """The command was refused as `too_large` for `what`, naming the limit, appending nothing."""
    assert decision.events == ()
    error = decision.reply["error"]
    assert error["code"] == "too_large"
    assert error["message"].startswith(f"the {what} would be ")
    assert error["message"].endswith(f" bytes; the server's max_payload is {limit}")
    assert error["details"]["limit"] == limit


@pytest.mark.parametrize(
    ("request_id", "providers"),
    [(None, False), ("req-2-\u00e9", False), ("req-2-\u00e9", True)],
)
def test_the_state_check_leaves_room_for_the_stream_seq_and_the_framing_and_no_more(
    request_id: str | None, providers: bool
) -> None:
    # The stored state has the chain head the drafts lack and remembers the reply; the check
    # adds 16 digits for the projector's stream_seq and 64 bytes for the KV framing. A
    # remembered reply is already held, so the new one is measured with its comma.
    driver = Driver()
    driver.ok("inject", reminder={"body": "first"}, request_id="req-1")
    state = driver.state
    if providers:
        state = state.model_copy(update={"providers": ProvidersState()})
    fields = {} if request_id is None else {"request_id": request_id}
    roomy = inject_into(state, 1024 * 1024, **fields)
    assert roomy.ok, roomy.reply
    stored = fold_all(state, roomy.events)
    assert stored.providers == state.providers
    assert len(stored.recent_replies) == len(state.recent_replies) + (request_id is not None)
    limit = len(stored.model_dump_json().encode()) + 16 + 64

    at_limit = inject_into(state, limit, **fields)
    assert at_limit.ok, at_limit.reply
    assert fold_all(state, at_limit.events) == stored

    below = inject_into(state, limit - 1, **fields)
    assert_too_large(below, "state", limit - 1)
    assert below.reply["error"]["details"]["size"] == limit


def test_a_session_whose_provider_latches_outgrow_the_bound_from_counts_is_measured() -> None:
    # The bound from counts allows each latch its longest id: here the latches alone are
    # larger than the limit, so the bound cannot show it fits and the state is measured.
    mark = ProviderMark(fired_count=1, level=2, last_fired_turn=3)
    marks = {long_id(n): mark for n in range(900)}
    state = SessionState(session_id="s1", providers=ProvidersState(marks=marks))
    limit = len(state.model_dump_json().encode())
    assert_too_large(inject_into(state, limit), "state", limit)


def test_a_session_with_a_few_provider_latches_is_not_serialised_to_know_it_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A session the providers evaluated holds their latches; the bound counts them, so the
    # state of such a session is not written out on every command to measure it.
    mark = ProviderMark(fired_count=1, level=2, last_fired_turn=3)
    state = SessionState(session_id="s1", providers=ProvidersState(marks={"idle_nudge": mark}))

    def measured(self: SessionState, **_: object) -> str:
        raise AssertionError("the state was serialised to measure it")

    monkeypatch.setattr(SessionState, "model_dump_json", measured)
    assert inject_into(state, 1024 * 1024).ok


@pytest.mark.parametrize("marks", [None, 0, 2])
def test_the_bound_is_given_the_sessions_latches_and_the_length_of_its_history(
    monkeypatch: pytest.MonkeyPatch, marks: int | None
) -> None:
    given: list[dict[str, int]] = []

    def bound(**counts: int) -> int:
        given.append(counts)
        return state_upper_bound(**counts)

    monkeypatch.setattr(core.batch, "state_upper_bound", bound)
    mark = ProviderMark(fired_count=1)
    providers = (
        None if marks is None else ProvidersState(marks={f"p{n}": mark for n in range(marks)})
    )
    history = ["a", "bb", "ccc"]
    state = SessionState(session_id="s1", seen_ids=history, fired_ids=["a"], providers=providers)
    decision = inject_into(state, 1024 * 1024)
    assert decision.ok
    new_id = decision.reply["reminder_id"]
    assert given[-1]["provider_marks"] == (marks or 0)
    # Each id's stored bytes with its quotes and comma: seen a, bb, ccc and the new id; fired a.
    assert given[-1]["history_bytes"] == 4 + 5 + 6 + 4 + len(new_id) + 3


@pytest.mark.parametrize("history", ["revoked_ids", "fired_ids"])
def test_a_long_history_of_revoked_or_fired_ids_is_counted_in_the_bound(history: str) -> None:
    # Every revoked or fired id is also a seen one; with ids at their longest, a session
    # whose history alone is larger than the bound's fixed part must still be measured.
    ids = [long_id(n) for n in range(2048)]
    state = SessionState(session_id="s1", seen_ids=ids, **{history: ids})
    limit = len(state.model_dump_json().encode())
    assert_too_large(inject_into(state, limit), "state", limit)


def test_a_history_that_lists_a_reissued_id_many_times_is_counted_row_by_row() -> None:
    # An id may be injected again once it expired (only a live or queued id is refused),
    # so envelopes of many turns can list the same id while `seen_ids` holds it once.
    again = long_id(0)
    digest = DeliveredDigest(turn_number=0, directive_ids=[again], text_sha256="0" * 64)
    history = [digest.model_copy(update={"turn_number": n}) for n in range(2048)]
    state = SessionState(session_id="s1", seen_ids=[again], fired_ids=[again], delivered=history)
    limit = len(state.model_dump_json().encode())
    assert_too_large(inject_into(state, limit), "state", limit)


def brimful(queued: int) -> tuple[SessionState, int]:
    """A session whose delivered text and remembered replies fill their byte bounds, with
    `queued` queued reminders of the longest ids; and the session budget they take."""
    full, _ = parse_reminder({"body": "b"})
    rows = [
        QueuedRow(
            reminder=ResolvedSpec.resolve(full, id=long_id(n), fired_at_turn=0),
            mode="finish_step",
            position=n + 1,
        )
        for n in range(queued)
    ]
    envelope = DeliveredEnvelope(
        turn_number=0,
        speaker="harness",
        directive_ids=[],
        text="t" * FULL_ENVELOPE_TEXT_BYTES,
        format="context-directives",
        nonce=None,
    )
    pad = RECENT_REPLIES_BYTES - json_bytes({"request_id": "old", "reply": {"pad": ""}})
    reply = RecentReply(request_id="old", reply={"pad": "p" * pad})
    state = SessionState(
        session_id="s1",
        queued=rows,
        seen_ids=[row.reminder.id or "" for row in rows],
        delivered=[envelope],
        recent_replies=[reply],
    )
    return state, sum(spec_bytes(row.reminder) for row in rows)


def test_queued_rows_are_counted_in_the_bound_like_live_ones() -> None:
    state, used = brimful(queued=256)
    limit = len(state.model_dump_json().encode())
    raw = {"session_id": "s1", "reminder": {"body": "b"}}
    config = CoreConfig(max_payload_bytes=limit, max_session_bytes=used + 1000, max_live=1000)
    decision = handle(state, "inject", raw, context_for(900), config)
    assert_too_large(decision, "state", limit)


def test_the_reply_a_command_will_remember_is_added_to_the_bound_not_taken_from_it() -> None:
    # A checkpoint that drains many reminders of long ids remembers a long reply.
    state, used = brimful(queued=64)
    limit = len(state.model_dump_json().encode())
    raw = {"session_id": "s1", "seam": "iteration_end", "turn": 0, "request_id": "cp"}
    config = CoreConfig(max_payload_bytes=limit, max_session_bytes=used, max_live=1000)
    decision = handle(state, "checkpoint", raw, context_for(900), config)
    assert_too_large(decision, "state", limit)
