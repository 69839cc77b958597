"""Acknowledge (SPEC §12.3) and the wall clock (§12.4) in the core: the decider, the fold,
the deadline pass every command runs first, `not_before` in the render summary, and
`replay --verify` re-deriving all of it. Every bad input is one coded error, nothing appended.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.events import Event
from contracts.spec import utc_millis
from contracts.state import SessionState
from contracts.stored import StoredEvent as Row
from core import CommandContext, CoreConfig, fold_all, handle
from core.canonical import event_subject
from core.clock import command_time
from core.decide import Decision
from replay.verify import verify
from tests.unit.test_replay_library import rechain

T0 = "2026-11-29T15:00:00.000Z"


def at(minute: int, second: int = 0) -> str:
    """A time on the test day, minutes and seconds after 15:00 UTC."""
    return f"2026-11-29T{15 + minute // 60:02d}:{minute % 60:02d}:{second:02d}.000Z"


class Clocked:
    """One session driven through `handle` at chosen times, folded like the projector."""

    def __init__(self, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.state = SessionState()
        self.log: list[Event] = []
        self.count = 0

    def run(self, op: str, when: str = T0, **fields: Any) -> Decision:
        self.count += 1
        context = CommandContext(
            command_id=f"cmd-{self.count:05d}",
            occurred_at=when,
            new_reminder_id=f"r-{self.count:05d}",
        )
        decision = handle(self.state, op, {"session_id": "s1", **fields}, context, self.config)
        self.state = fold_all(self.state, decision.events)
        self.log.extend(decision.events)
        return decision

    def ok(self, op: str, when: str = T0, **fields: Any) -> dict[str, Any]:
        decision = self.run(op, when, **fields)
        assert decision.ok, decision.reply
        return decision.reply

    def error(self, op: str, when: str = T0, **fields: Any) -> str:
        before = self.state
        decision = self.run(op, when, **fields)
        assert not decision.ok, decision.reply
        assert decision.events == () and self.state == before
        return str(decision.reply["error"]["code"])

    def inject(self, body: str, when: str = T0, **spec: Any) -> str:
        return str(self.ok("inject", when, reminder={"body": body, **spec})["reminder_id"])

    def rows(self) -> list[Row]:
        return [
            Row(e.to_wire(), n, event_subject(e.kind, e.session_id))
            for n, e in enumerate(self.log, 1)
        ]


# --- times -------------------------------------------------------------------------------


def test_times_are_stored_in_utc_with_milliseconds_whatever_their_offset() -> None:
    assert utc_millis("2026-11-29T16:04:05.123456+01:00") == "2026-11-29T15:04:05.123Z"
    assert utc_millis("2026-11-29t15:04:05z") == "2026-11-29T15:04:05.000Z"
    session = Clocked()
    rid = session.inject("x", not_before="2026-11-29T10:30:00-05:00")
    assert session.state.pending[0].spec.not_before == "2026-11-29T15:30:00.000Z"
    assert session.log[-1].to_wire()["payload"]["reminder"]["not_before"].endswith("Z")
    assert rid


@pytest.mark.parametrize(
    "spec",
    [
        {"not_before": "tomorrow"},
        {"expires_at": "2026-11-29 15:00:00Z"},  # a space is not RFC 3339
        {"expires_at": "2026-11-29T15:00:00"},  # no offset
        {"expires_at": "2026-02-30T15:00:00Z"},  # no such day
        {"not_before": 1764428400},
        {"not_before": at(10), "expires_at": at(10)},  # at not_before
        {"not_before": at(10), "expires_at": at(5)},  # before not_before
        {"expires_at": T0},  # at the command's own time
        {"expires_at": "2026-11-29T14:00:00Z"},  # before it
    ],
)
def test_a_bad_time_is_harn_rmd_001_and_appends_nothing(spec: dict[str, Any]) -> None:
    session = Clocked()
    code = session.error("inject", T0, reminder={"body": "x", **spec})
    assert code == "HARN-RMD-001"
    assert session.error("inject", T0, mode="finish_step", reminder={"body": "x", **spec})


def test_an_expires_at_not_after_the_command_names_the_field_and_the_command_time() -> None:
    # The time the deadline is compared with is the command's, which a client never sent.
    for mode in (None, "finish_step"):
        session = Clocked()
        fields = {} if mode is None else {"mode": mode}
        error = session.run("inject", at(5), reminder={"body": "x", "expires_at": at(4)}, **fields)
        assert error.reply["error"]["details"] == {"field": "expires_at", "occurred_at": at(5)}
        assert error.events == ()


def test_a_command_time_never_goes_backwards() -> None:
    assert command_time(at(5), at(7)) == at(7)
    assert command_time(at(7), at(5)) == at(7)
    assert command_time(at(7), None) == at(7)


# --- not_before ----------------------------------------------------------------------------


def test_a_reminder_not_yet_due_is_listed_and_rendered_once_due() -> None:
    session = Clocked()
    later = session.inject("after the deploy window", not_before=at(30))
    now = session.inject("now")
    reply = session.ok("render", at(1), turn=0)
    assert reply["envelope"]["directive_ids"] == [now]
    assert reply["summary"]["not_yet_ids"] == [later]
    # Nothing else eligible: the render withholds with reason not_yet.
    nothing = session.run("render", at(2), turn=1)
    assert [e.kind for e in nothing.events] == ["withheld"]
    assert session.ok("render", at(30), turn=2)["envelope"]["directive_ids"] == [later]
    assert verify(session.rows()) is None


# --- deadlines -----------------------------------------------------------------------------


def test_every_command_first_expires_what_is_past_its_deadline_in_its_batch() -> None:
    session = Clocked()
    gone = session.inject("drop this at 15:10", expires_at="2026-11-29T16:10:00+01:00", ttl_turns=3)
    kept = session.inject("keep")
    assert session.ok("render", at(9), turn=0)["envelope"]["directive_ids"] == [gone, kept]
    decision = session.run("sanitize", at(10), text="plain", turn=0)
    assert [e.kind for e in decision.events] == ["expired"]
    payload = decision.events[0].payload.model_dump()
    assert payload == {
        "reminder_id": gone,
        "reason": "deadline",
        "ttl_turns_before": 3,
        "expired_at_turn": 0,
        "expired_at_boundary": "deadline",
    }
    assert [row.spec.id for row in session.state.pending] == [kept]
    assert verify(session.rows()) is None


def test_a_deadline_expires_before_the_render_so_it_is_never_rendered_late() -> None:
    session = Clocked()
    session.inject("soon gone", expires_at=at(5))
    decision = session.run("render", at(5), turn=0)
    assert [e.kind for e in decision.events] == ["expired"]
    assert decision.reply["envelope"] is None
    assert verify(session.rows()) is None


def test_a_rejected_command_expires_nothing() -> None:
    session = Clocked()
    session.inject("soon gone", expires_at=at(5))
    session.ok("render", at(1), turn=3)
    assert session.error("render", at(6), turn=1) == "stale_turn"
    assert len(session.state.pending) == 1


def test_propagation_carries_both_times_to_the_child() -> None:
    session = Clocked()
    session.inject("timed", not_before=at(3), expires_at=at(9), propagate="all")
    reply = session.ok("handoff", at(1), child_session_id="child")
    spec = session.log[-1].payload.reminders[0]  # type: ignore[union-attr]
    assert (spec.not_before, spec.expires_at) == (at(3), at(9))
    assert reply["propagated_ids"]


def test_verify_re_derives_every_deadline_expiry() -> None:
    session = Clocked()
    session.inject("a", expires_at=at(5))
    session.ok("end_turn", at(6), turn=0)
    rows = session.rows()
    assert verify(rows) is None
    # A forger who drops the expiry (and re-chains) is caught.
    without = [r for r in rows if r.envelope["kind"] != "expired"]
    for n, row in enumerate(without, 1):
        row.envelope["session_seq"] = n
    problem = verify(rechain(without))
    assert problem is not None and "expires_at" in problem


def test_verify_flags_time_going_backwards() -> None:
    session = Clocked()
    session.inject("a", when=at(5))
    session.inject("b", when=at(4))
    problem = verify(session.rows())
    assert problem is not None and "never goes backwards" in problem


# --- acknowledge ---------------------------------------------------------------------------


def _delivered_session() -> tuple[Clocked, str, str, str]:
    session = Clocked()
    shown = session.inject("shown", ttl_turns=1)
    live = session.inject("also shown")
    queued = str(
        session.ok("inject", reminder={"body": "queued"}, mode="finish_step")["reminder_id"]
    )
    session.ok("render", turn=0)
    return session, shown, live, queued


def test_acted_is_recorded_and_a_repeat_appends_nothing() -> None:
    session, shown, _, _ = _delivered_session()
    session.ok("end_turn", turn=0)  # it expires by TTL: acknowledging it still works
    reply = session.ok(
        "acknowledge", reminder_id=shown, turn=1, outcome="acted", by="model", note="done"
    )
    assert reply["already_acknowledged"] is False
    event = session.log[-1]
    assert event.kind == "acknowledged"
    assert event.payload.model_dump() == {
        "reminder_id": shown,
        "turn_number": 1,
        "outcome": "acted",
        "by": "model",
        "note": "done",
    }
    again = session.run("acknowledge", reminder_id=shown, turn=1, outcome="acted")
    assert again.events == () and again.reply["already_acknowledged"] is True
    assert session.state.acknowledged == {shown: ["acted"]}
    assert verify(session.rows()) is None


def test_dismissed_removes_the_reminder_and_a_repeat_is_a_no_op() -> None:
    session, _, live, _ = _delivered_session()
    decision = session.run("acknowledge", reminder_id=live, turn=0, outcome="dismissed")
    assert [e.kind for e in decision.events] == ["acknowledged", "expired"]
    expired = decision.events[1].payload.model_dump()
    assert (expired["reason"], expired["expired_at_boundary"]) == ("dismissed", "acknowledge")
    assert live not in [row.spec.id for row in session.state.pending]
    again = session.run("acknowledge", reminder_id=live, turn=0, outcome="dismissed")
    assert again.ok and again.events == () and again.reply["already_acknowledged"] is True
    assert verify(session.rows()) is None


def test_a_never_delivered_reminder_may_be_dismissed_but_not_acted_on() -> None:
    session = Clocked()
    rid = session.inject("never rendered", fired_at_turn=5)
    assert session.error("acknowledge", reminder_id=rid, turn=0, outcome="acted") == "HARN-RMD-001"
    assert session.error("acknowledge", reminder_id=rid, turn=0, outcome="ignored")
    session.ok("acknowledge", reminder_id=rid, turn=0, outcome="dismissed", by="host")


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"reminder_id": "nope", "outcome": "acted"}, "unknown_reminder_id"),
        ({"outcome": "loved"}, "HARN-RMD-001"),
        ({"outcome": "acted", "by": "robot"}, "HARN-RMD-001"),
        ({"outcome": "acted", "note": "n" * 257}, "HARN-RMD-001"),
        ({"outcome": "acted", "note": 3}, "HARN-RMD-001"),
        ({"outcome": "acted", "colour": "red"}, "invalid_request"),
    ],
)
def test_bad_acknowledgements_are_coded_errors_that_append_nothing(
    fields: dict[str, Any], code: str
) -> None:
    session, shown, _, _ = _delivered_session()
    assert session.error("acknowledge", **{"reminder_id": shown, "turn": 0, **fields}) == code


def test_dismissing_a_gone_or_queued_reminder_is_refused() -> None:
    session, shown, _, queued = _delivered_session()
    session.ok("end_turn", turn=0)  # `shown` expires by TTL
    assert session.error("acknowledge", reminder_id=shown, turn=1, outcome="dismissed")
    assert session.error("acknowledge", reminder_id=queued, turn=1, outcome="acted")
    assert session.error("acknowledge", reminder_id=queued, turn=1, outcome="dismissed")


def test_a_note_is_redacted_like_bodies() -> None:
    session = Clocked(CoreConfig(redact=True))
    rid = session.inject("x")
    session.ok("render", turn=0)
    session.ok(
        "acknowledge",
        reminder_id=rid,
        turn=0,
        outcome="acted",
        note="used sk-proj-Abc123Def456Ghi789Jkl012Mno345",
    )
    payload = session.log[-1].payload
    assert payload.note == "used [REDACTED:api_key]"  # type: ignore[union-attr]
    assert payload.redactions == 1  # type: ignore[union-attr]
    assert verify(session.rows()) is None


def test_a_repeated_request_id_answers_from_the_log() -> None:
    session, shown, _, _ = _delivered_session()
    first = session.ok("acknowledge", reminder_id=shown, turn=0, outcome="acted", request_id="q")
    again = session.run("acknowledge", reminder_id=shown, turn=0, outcome="ignored", request_id="q")
    assert again.events == () and again.reply == first


# --- the property: decide, fold and verify agree on every deadline -----------------------

OPS = st.sampled_from(["inject", "render", "end_turn", "sanitize", "acknowledge"])


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(OPS, st.integers(0, 5), st.integers(-1, 12), st.integers(-1, 12)),
        min_size=1,
        max_size=25,
    )
)
def test_replay_reproduces_every_deadline_expiry(
    steps: list[tuple[str, int, int, int]],
) -> None:
    """Any sequence of commands at any (even backwards) gateway clock readings: the
    command's time is `command_time`, decide expires exactly what is past its deadline,
    folding the log gives the state decide saw, and verify re-derives every expiry."""
    session = Clocked()
    clock: str | None = None
    turn = 0
    for op, advance, not_before, expires in steps:
        now = command_time(at(advance * 2 + turn), clock)
        clock = now
        spec: dict[str, Any] = {"body": f"b{session.count}"}
        if not_before >= 0:
            spec["not_before"] = at(not_before * 3)
        if expires >= 0:
            spec["expires_at"] = at(expires * 3 + 1)
        if op == "inject":
            decision = session.run("inject", now, reminder=spec)
        elif op == "acknowledge" and session.state.seen_ids:
            target = session.state.seen_ids[-1]
            decision = session.run(
                "acknowledge", now, reminder_id=target, turn=turn, outcome="dismissed"
            )
        elif op == "end_turn":
            decision = session.run("end_turn", now, turn=turn)
            turn += 1
        elif op == "sanitize":
            decision = session.run("sanitize", now, turn=turn, text="t")
        else:
            decision = session.run("render", now, turn=turn)
        if decision.ok:  # an accepted command leaves nothing live past its deadline
            assert not [
                row
                for row in session.state.pending
                if row.spec.expires_at is not None and row.spec.expires_at <= now
            ]
    assert fold_all(SessionState(), session.log) == session.state
    assert verify(session.rows()) is None
    expired = [
        e
        for e in session.log
        if e.kind == "expired" and e.payload.reason == "deadline"  # type: ignore[union-attr]
    ]
    for event in expired:
        assert event.payload.expired_at_boundary == "deadline"  # type: ignore[union-attr]


def test_the_gateway_decides_at_the_later_of_its_clock_and_the_sessions_last_time() -> None:
    from core.clock import timed

    session = Clocked()
    session.inject("a", when=at(9))
    assert session.state.last_occurred_at == at(9)
    behind = CommandContext(command_id="c", occurred_at=at(3), new_reminder_id="r")
    assert timed(behind, session.state).occurred_at == at(9)
    ahead = behind.model_copy(update={"occurred_at": at(12)})
    assert timed(ahead, session.state) is ahead


def test_verify_flags_a_deadline_expiry_of_a_reminder_not_past_its_deadline() -> None:
    session = Clocked()
    session.inject("a", expires_at=at(5))
    session.inject("b")
    session.ok("clear", at(1), selector={"id": "r-00002"})
    rows = session.rows()
    payload = rows[-1].envelope["payload"]
    payload["reason"], payload["expired_at_boundary"] = "deadline", "deadline"
    problem = verify(rechain(rows))
    assert problem is not None and "deadline" in problem


def test_every_outcome_of_one_reminder_is_remembered_in_order() -> None:
    session, shown, _, _ = _delivered_session()
    session.ok("acknowledge", reminder_id=shown, turn=0, outcome="acted")
    session.ok("acknowledge", reminder_id=shown, turn=0, outcome="ignored")
    assert session.state.acknowledged == {shown: ["acted", "ignored"]}
    again = session.run("acknowledge", reminder_id=shown, turn=0, outcome="acted")
    assert again.events == () and again.reply["already_acknowledged"] is True


def test_each_acknowledge_refusal_names_the_reminder_and_the_field() -> None:
    session, shown, _, queued = _delivered_session()
    session.ok("end_turn", turn=0)  # `shown` expires by TTL
    cases = [
        (
            {"reminder_id": "nope", "outcome": "acted"},
            "unknown_reminder_id",
            "no reminder with this id was ever seen in the session",
            {"reminder_id": "nope"},
        ),
        (
            {"reminder_id": shown, "outcome": "dismissed"},
            "HARN-RMD-001",
            "invalid outcome: dismissed needs a live reminder (a queued one is revoked)",
            {"field": "outcome", "reminder_id": shown},
        ),
        (
            {"reminder_id": queued, "outcome": "ignored"},
            "HARN-RMD-001",
            "invalid outcome: ignored needs a reminder delivered at least once",
            {"field": "outcome", "reminder_id": queued},
        ),
    ]
    for fields, code, message, details in cases:
        decision = session.run("acknowledge", turn=1, **fields)
        assert not decision.ok and decision.events == ()
        assert decision.reply["error"] == {"code": code, "message": message, "details": details}


def test_redaction_leaves_an_acknowledgement_without_a_note_as_it_is() -> None:
    session = Clocked(CoreConfig(redact=True))
    rid = session.inject("x")
    session.ok("render", turn=0)
    session.ok("acknowledge", reminder_id=rid, turn=0, outcome="acted")
    payload = session.log[-1].payload
    assert (payload.note, payload.redactions) == (None, 0)  # type: ignore[union-attr]
