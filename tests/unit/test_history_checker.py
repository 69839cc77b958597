"""The history checker on hand-made histories: a legal one passes, and each anomaly is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.faults.checker import Event, Op, check, read_export, read_history

S = "s1"


def op(
    op_id: int,
    name: str,
    invoked: float,
    completed: float | None,
    status: str = "ok",
    client: str = "c1",
    **reply: Any,
) -> Op:
    """An op with request_id `r<op_id>`; `payload` inside `reply` goes to the payload."""
    payload = reply.pop("payload", {})
    return Op(op_id, client, name, S, f"r{op_id}", invoked, payload, completed, status, reply)


def ev(
    seq: int,
    command: str,
    kind: str = "injected",
    request: str | None = None,
    at: str | None = None,
    last: bool = True,
    event_id: str | None = None,
) -> Event:
    """An event at session_seq `seq` (stream_seq 10×seq) of command `command`."""
    return Event(
        stream_seq=10 * seq,
        session_seq=seq,
        kind=kind,
        command_id=command,
        request_id=request,
        occurred_at=at or f"2026-12-01T10:00:{seq:02d}.000Z",
        event_id=event_id or f"e{seq}",
        reply={"ok": True} if last else None,
    )


def kinds(ops: list[Op], events: list[Event]) -> dict[str, int]:
    return check(ops, {S: events}).by_kind()


def legal() -> tuple[list[Op], list[Event]]:
    ops = [
        op(1, "inject", 0.0, 1.0, session_seq=2),
        op(2, "end_turn", 1.1, 2.0, session_seq=3),
        op(3, "state", 2.1, 2.2, state={"session_seq": 3}, stale=False),
    ]
    events = [
        ev(1, "c1", "deduped", "r1", last=False),
        ev(2, "c1", "injected", "r1"),
        ev(3, "c2", "post_turn", "r2"),
    ]
    return ops, events


def test_a_legal_history_has_no_anomaly() -> None:
    ops, events = legal()
    report = check(ops, {S: events})
    assert report.anomalies == [], report.summary()
    assert report.counts["applied"] == 2


def test_an_acked_command_missing_from_the_log_is_lost() -> None:
    ops, events = legal()
    found = check(ops, {S: events[:2]})
    assert found.by_kind() == {"lost": 1}
    assert "#2" in str(found.anomalies[0]) and "end_turn" in str(found.anomalies[0])


def test_a_request_decided_twice_is_duplicated() -> None:
    ops, events = legal()
    events.append(ev(4, "c9", "post_turn", "r2"))
    assert kinds(ops, events) == {"duplicated": 1}


def test_an_event_stored_twice_is_duplicated() -> None:
    ops, events = legal()
    events.append(ev(4, "c7", "post_turn", None, event_id="e3"))
    assert kinds(ops, events) == {"duplicated": 1}


def test_a_batch_missing_its_last_event_is_partial() -> None:
    ops, events = legal()
    # the deduped event landed without the injected one (nor the reply it carries)
    ops[0].status, ops[0].reply = "info", {"error": {"code": "unavailable"}}
    assert kinds(ops[:1], events[:1]) == {"partial": 1}


def test_a_batch_missing_a_middle_event_is_partial() -> None:
    ops, events = legal()
    # dropping session_seq 1 of the acked inject leaves a gap and a command without `deduped`
    ops[0].reply["session_seq"] = 2
    found = kinds(ops, events[1:])
    assert found.get("partial", 0) >= 1


def test_a_command_split_in_two_runs_is_partial() -> None:
    ops = [
        op(1, "inject", 0.0, 1.0, session_seq=3),
        op(2, "end_turn", 0.0, 1.0, session_seq=2),
    ]
    events = [
        ev(1, "c1", "deduped", "r1", last=False),
        ev(2, "c2", "post_turn", "r2"),
        ev(3, "c1", "injected", "r1"),
    ]
    assert kinds(ops, events).get("partial", 0) >= 1


def test_a_definite_failure_that_left_events_is_a_phantom() -> None:
    ops, events = legal()
    ops[1].status, ops[1].reply = "fail", {"error": {"code": "conflict"}}
    assert kinds(ops, events) == {"phantom": 1}


def test_an_indeterminate_command_may_land_whole_or_not_at_all() -> None:
    ops, events = legal()
    ops[1].status, ops[1].reply, ops[1].completed = "info", {}, None
    assert kinds(ops, events) == {}
    assert kinds(ops, events[:2]) == {}


def test_a_command_acked_before_another_was_invoked_but_logged_after_it_is_reordered() -> None:
    ops = [
        op(1, "inject", 0.0, 1.0, session_seq=2),
        op(2, "end_turn", 2.0, 3.0, client="c2", session_seq=1),
    ]
    events = [ev(1, "c2", "post_turn", "r2"), ev(2, "c1", "injected", "r1")]
    found = check(ops, {S: events})
    assert found.by_kind() == {"reordered": 1}
    assert "#1" in str(found.anomalies[0]) and "#2" in str(found.anomalies[0])


def test_concurrent_commands_may_land_in_either_order() -> None:
    ops = [
        op(1, "inject", 0.0, 3.0, session_seq=2),
        op(2, "end_turn", 1.0, 2.0, client="c2", session_seq=1),
    ]
    events = [ev(1, "c2", "post_turn", "r2"), ev(2, "c1", "injected", "r1")]
    assert kinds(ops, events) == {}


def test_a_read_that_misses_an_acked_write_is_stale() -> None:
    ops, events = legal()
    ops[2].reply = {"state": {"session_seq": 2}, "stale": False}
    ops[2].client = "c2"  # another client: its own view never went down
    assert kinds(ops, events) == {"stale read": 1}


def test_a_read_below_its_min_seq_is_stale_and_a_flagged_one_is_not() -> None:
    ops = [op(1, "state", 0.0, 1.0, state={"session_seq": 1}, stale=False, payload={"min_seq": 2})]
    assert kinds(ops, [ev(1, "c0", "injected"), ev(2, "c1", "injected")]) == {"stale read": 1}
    ops[0].reply["stale"] = True
    assert kinds(ops, [ev(1, "c0", "injected"), ev(2, "c1", "injected")]) == {}


def test_a_client_seeing_session_seq_go_down_is_reported() -> None:
    ops = [
        op(1, "state", 0.0, 1.0, state={"session_seq": 2}, stale=False),
        op(2, "state", 1.5, 2.0, state={"session_seq": 1}, stale=False),
    ]
    events = [ev(1, "c0", "injected"), ev(2, "c1", "injected")]
    assert kinds(ops, events) == {"seq went backwards": 1}


def test_recorded_time_going_backwards_is_reported() -> None:
    ops, events = legal()
    events[2] = ev(3, "c2", "post_turn", "r2", at="2026-12-01T09:59:30.000Z")
    found = check(ops, {S: events})
    assert found.by_kind() == {"time went backwards": 1}
    assert "09:59:30" in str(found.anomalies[0])


def test_an_acked_reply_naming_another_seq_is_lost() -> None:
    ops, events = legal()
    ops[1].reply["session_seq"] = 4
    assert kinds(ops[:2], events) == {"lost": 1}


def test_no_op_replies_need_no_events() -> None:
    ops = [
        op(1, "end_turn", 0.0, 1.0, session_seq=0, already_applied=True),
        op(2, "render", 1.0, 2.0, session_seq=0, envelope=None),
        op(3, "clear", 2.0, 3.0, session_seq=0, removed_count=0),
    ]
    assert kinds(ops, []) == {}


def test_a_history_and_an_export_read_back_from_files(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    rows = [
        {
            "type": "invoke",
            "op_id": 1,
            "client": "c1",
            "op": "inject",
            "session_id": S,
            "request_id": "r1",
            "t": 0.0,
            "payload": {},
        },
        {"type": "ok", "op_id": 1, "t": 1.0, "reply": {"ok": True, "session_seq": 1}},
    ]
    history.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    export = tmp_path / "export.jsonl"
    envelope = {
        "session_id": S,
        "session_seq": 1,
        "kind": "injected",
        "command_id": "c1",
        "request_id": "r1",
        "occurred_at": "2026-12-01T10:00:00.000Z",
        "event_id": "e1",
        "reply": {"ok": True},
        "stream_seq": 5,
    }
    export.write_text(json.dumps(envelope) + "\n", encoding="utf-8")
    assert check(read_history(history), read_export(export)).anomalies == []


def test_a_no_op_decided_on_a_state_missing_an_acked_write_is_a_stale_read() -> None:
    ops, events = legal()
    # another gateway, its cache behind, answers a render from before the inject
    ops[2] = op(3, "render", 2.1, 2.2, client="c2", session_seq=0, envelope=None)
    found = check(ops, {S: events})
    assert found.by_kind() == {"stale read": 1}
    assert "render appended nothing" in str(found.anomalies[0])
