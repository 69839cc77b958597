"""The state check's bound counts what only a long history grows by its measured bytes:
the acknowledged reminders' ids, the digests of older envelopes, the live reminders' specs
and the kept envelopes' texts. So a session that lived long is not serialised on every
command to know its state fits (a session of a thousand rendered turns was, at several
times a command's cost), and the bound still never under-counts a state."""

from __future__ import annotations

from typing import Any

import pytest

import core.batch
from contracts import commands as cmd
from contracts.spec import MAX_WIRE_INT
from contracts.state import DeliveredDigest, DeliveredEnvelope, SessionState
from core import decide
from core.fold import _HISTORY_BYTES, _KEPT_RUNS, Scratch
from core.kept import KeptRun, history_of
from core.size import digest_bytes, json_bytes, state_upper_bound
from tests.support import context_for
from tests.unit.test_mutants_batch import assert_too_large, inject_into, long_id


def never_serialised(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make measuring a state by serialising it fail the test."""

    def measured(self: SessionState, **_: object) -> str:
        raise AssertionError("the state was serialised to measure it")

    monkeypatch.setattr(SessionState, "model_dump_json", measured)


def short_id(n: int) -> str:
    """The n-th reminder id of a usual length (a UUID's)."""
    return f"{n:08d}-0000-7000-8000-000000000000"


def digest(turn: int, ids: list[str]) -> DeliveredDigest:
    """An older envelope's digest."""
    return DeliveredDigest(turn_number=turn, directive_ids=ids, text_sha256="0" * 64)


def envelope(turn: int, text: str) -> DeliveredEnvelope:
    """An envelope kept in full."""
    return DeliveredEnvelope(
        turn_number=turn,
        speaker="harness",
        directive_ids=[short_id(turn)],
        text=text,
        format="context-directives",
        nonce=None,
    )


def test_a_session_that_acknowledged_thousands_of_reminders_is_not_serialised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = [short_id(n) for n in range(2000)]
    state = SessionState(
        session_id="s1",
        seen_ids=ids,
        fired_ids=ids,
        acknowledged={item: ["acted"] for item in ids},
    )
    never_serialised(monkeypatch)
    assert inject_into(state, 1024 * 1024).ok


def test_a_session_of_thousands_of_rendered_turns_is_not_serialised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = [short_id(n) for n in range(2000)]
    delivered: list[DeliveredEnvelope | DeliveredDigest] = [
        digest(n, [item]) for n, item in enumerate(ids)
    ]
    delivered += [envelope(2000 + n, "t" * 2000) for n in range(64)]
    state = SessionState(session_id="s1", seen_ids=ids, fired_ids=ids, delivered=delivered)
    never_serialised(monkeypatch)
    assert inject_into(state, 1024 * 1024).ok


def test_acknowledged_reminders_of_the_longest_ids_are_counted_in_the_bound() -> None:
    ids = [long_id(n) for n in range(1024)]
    outcomes: dict[str, Any] = {item: ["acted", "ignored", "dismissed"] for item in ids}
    state = SessionState(session_id="s1", seen_ids=ids, acknowledged=outcomes)
    limit = len(state.model_dump_json().encode())
    assert_too_large(inject_into(state, limit), "state", limit)


def test_an_envelope_kept_in_full_before_a_digest_is_still_counted() -> None:
    # Not a state the fold makes (it turns the oldest envelopes into digests), so the bound
    # cannot take it for a digest: it is counted whole.
    delivered: list[DeliveredEnvelope | DeliveredDigest] = [
        envelope(0, "x" * 300_000),
        digest(1, [short_id(1)]),
        envelope(2, "y"),
    ]
    state = SessionState(session_id="s1", delivered=delivered)
    limit = len(state.model_dump_json().encode())
    assert_too_large(inject_into(state, limit), "state", limit)


def test_the_kept_envelopes_texts_are_counted_in_the_bound() -> None:
    state = SessionState(session_id="s1", delivered=[envelope(0, "z" * 600_000)])
    limit = len(state.model_dump_json().encode())
    assert_too_large(inject_into(state, limit), "state", limit)


def run(state: SessionState, op: str, n: int, **fields: Any) -> SessionState:
    """Decide one command on `state` and keep the state after it, as the gateway does."""
    command, _ = cmd.parse_command(op, {"session_id": "s1", **fields})
    decision = decide(state, command, context_for(n, "n0nce"))
    assert decision.ok, decision.reply
    return decision.state_after(state, n) if decision.events else state


def test_the_carried_history_and_kept_run_are_those_measured_again() -> None:
    state, n = SessionState(), 0
    for turn in range(150):
        n += 1
        state = run(state, "inject", n, reminder={"body": f"turn {turn}", "ttl_turns": 1})
        reminder_id = state.pending[-1].spec.id
        n += 1
        state = run(state, "render", n, turn=turn)
        n += 1
        state = run(state, "acknowledge", n, reminder_id=reminder_id, turn=turn, outcome="acted")
        n += 1
        state = run(state, "end_turn", n, turn=turn)
        if turn == 20:
            n += 1
            state = run(state, "compact", n, turn=turn)
        carried = _HISTORY_BYTES.known(state)
        assert carried is None or carried == history_of(state)
        kept = _KEPT_RUNS.known(state)
        assert kept is None or kept == KeptRun.of(state.delivered)
    assert any(isinstance(row, DeliveredDigest) for row in state.delivered)
    assert _HISTORY_BYTES.known(state) == history_of(state)
    # Past FULL_ENVELOPES_KEPT turns: the run lost its oldest rows to digests as it went.
    assert _KEPT_RUNS.known(state) == KeptRun.of(state.delivered)
    assert KeptRun.of(state.delivered).start > 0


def test_the_kept_run_follows_envelopes_that_come_and_digests_anywhere_in_it() -> None:
    state = SessionState(
        session_id="s1",
        delivered=[digest(1, ["a"]), envelope(2, "two"), envelope(3, "three!")],
    )
    scratch = Scratch.thaw(state)
    assert scratch.kept_run() == KeptRun(start=1, text_bytes=len("twothree!"), directive_ids=2)
    scratch.deliver(envelope(4, "four"))
    assert scratch.kept_run() == KeptRun.of(scratch.delivered) == KeptRun(1, 13, 3)
    scratch.digest_delivered(2)  # not the run's first row: the run is the rows after it
    assert scratch.kept_run() == KeptRun.of(scratch.delivered) == KeptRun(3, 4, 1)
    scratch.digest_delivered(3)  # the run's only row
    assert scratch.kept_run() == KeptRun.of(scratch.delivered) == KeptRun(4, 0, 0)
    scratch.deliver(envelope(5, "five"))  # after a digest: a run of one
    assert scratch.kept_run() == KeptRun.of(scratch.delivered) == KeptRun(4, 4, 1)
    released = scratch.release()
    assert _KEPT_RUNS.known(released) == KeptRun(4, 4, 1)  # carried to the next command
    again = Scratch.thaw(released)
    again.clear_delivered()
    assert again.kept_run() == KeptRun(0, 0, 0)


def test_the_kept_run_is_counted_as_it_changes_not_measured_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = SessionState(session_id="s1", delivered=[envelope(1, "one"), envelope(2, "two")])
    scratch = Scratch.thaw(state)
    assert scratch.kept_run() == KeptRun(0, 6, 2)

    def measured_again(cls: type[KeptRun], rows: object) -> KeptRun:
        raise AssertionError("the kept run was measured again")

    monkeypatch.setattr(KeptRun, "of", classmethod(measured_again))
    scratch.deliver(envelope(3, "three"))
    scratch.digest_delivered(0)  # the run's first row, as the fold digests them
    assert scratch.kept_run() == KeptRun(1, len("twothree"), 2)
    # Handed to the state released, and from it to the next command's scratch.
    assert Scratch.thaw(scratch.release()).kept_run() == KeptRun(1, len("twothree"), 2)


def test_a_digests_bytes_are_its_stored_size_at_the_largest_turn_with_its_comma() -> None:
    for ids in ([], ["a"], [short_id(1), short_id(2)]):
        row = DeliveredDigest(turn_number=MAX_WIRE_INT, directive_ids=ids, text_sha256="0" * 64)
        stored = json_bytes(row.model_dump(mode="json"))
        # Its comma, and each id counted with one too (the last one has none).
        assert digest_bytes(row) == stored + 1 + (1 if ids else 0)


def test_an_envelope_before_a_digest_counts_its_whole_stored_size_in_the_history() -> None:
    early = envelope(0, "x" * 50)
    older = digest(1, [short_id(1)])
    state = SessionState(session_id="s1", delivered=[early, older, envelope(2, "y")])
    assert history_of(state) == json_bytes(early.model_dump(mode="json")) + 1 + digest_bytes(older)


def test_the_bound_is_trusted_exactly_up_to_the_payload_and_no_further(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bounds: list[int] = []

    def recorded(**counts: int) -> int:
        bounds.append(state_upper_bound(**counts))
        return bounds[-1]

    monkeypatch.setattr(core.batch, "state_upper_bound", recorded)
    state = SessionState(session_id="s1")
    assert inject_into(state, 1024 * 1024).ok
    # The bound, the chain head, the projector's stream_seq and the KV framing.
    at_most = bounds[-1] + 64 + 16 + 64
    serialised: list[int] = []
    original = SessionState.model_dump_json

    def counted(self: SessionState, **options: Any) -> str:
        serialised.append(1)
        return original(self, **options)

    monkeypatch.setattr(SessionState, "model_dump_json", counted)
    assert inject_into(state, at_most).ok
    assert serialised == []  # surely fits: not measured
    assert inject_into(state, at_most - 1).ok
    assert serialised == [1]  # not sure: measured (and it fits)
