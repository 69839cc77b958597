"""The providers service's step (1): the session view read from the projection bucket through
its read port (faked here; the real one, which waits on the shared watch, is proven on a real
server in tests/integration), with `min_seq`, and how each answer settles the runtime event."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson
import pytest

from contracts.agent_events import RuntimeEvent, decode_runtime_event
from contracts.records import Tombstone
from contracts.state import RecentReply, SessionState
from contracts.subjects import EVALUATE_OP, session_token
from core.providers import (
    NOT_IN_VIEW,
    build_config,
    default_config,
    evaluate_event,
    evaluation_request_id,
    provider_view,
)
from services.adapters.projection import Projected, TooManyWaiting, read_projected
from services.adapters.record_codec import encode_state
from services.consumer import ACK, dead_letter, retry
from services.providers.app import LastReplies, handle_runtime_event, read_view
from tests.support import Driver

AT = "2026-11-29T15:04:05.123Z"
SESSION = "s-view"


def truncated(event_id: str = "rt-1") -> RuntimeEvent:
    return decode_runtime_event(
        {
            "schema": "reminder-ledger.agent-event/v1",
            "event_id": event_id,
            "kind": "tool_result",
            "session_id": SESSION,
            "turn": 3,
            "occurred_at": AT,
            "payload": {"tool_name": "bash", "truncated": True, "original_bytes": 9000},
        }
    )


class Bucket:
    """A fake read port: the values one key takes, one after another (the last stays); a wait
    sees them in order until one is ready, or runs out (stale)."""

    def __init__(self, *values: bytes | Exception | None, keep_parsed: bool = False) -> None:
        self.values = list(values)
        self.keys: list[str] = []
        self.seen = 0
        self.keep_parsed = keep_parsed

    async def until(
        self, token: str, ready: Callable[[Projected], bool], timeout_s: float
    ) -> tuple[Projected, bool]:
        self.keys.append(token)
        for value in self.values:
            self.seen += 1
            if isinstance(value, Exception):
                raise value
            record = read_projected(value, self.keep_parsed)
            if ready(record):
                return record, False
        return record, True


class Gateway:
    """A fake gateway that answers only `evaluate` (the view never comes from it)."""

    def __init__(self, reply: dict[str, Any] | Exception | None = None) -> None:
        self.reply = reply if reply is not None else {"ok": True, "session_seq": 7}
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, op: str, command: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((op, command))
        assert op == EVALUATE_OP, f"only evaluate goes to the gateway, not {op}"
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def state(session_seq: int) -> bytes:
    return encode_state(SessionState(session_id=SESSION, session_seq=session_seq))


async def test_the_view_is_read_from_the_sessions_key_and_one_evaluate_is_sent() -> None:
    bucket, gateway, replies = Bucket(state(4)), Gateway(), LastReplies()
    outcome = await handle_runtime_event(truncated(), default_config(), gateway, bucket, replies)
    assert outcome == ACK
    assert bucket.keys == [session_token(SESSION)]
    ((op, command),) = gateway.sent
    assert op == EVALUATE_OP
    assert command["request_id"] == evaluation_request_id("rt-1")
    assert command["view_seq"] == 4
    assert replies.get(SESSION) == 7


async def test_a_missing_key_or_a_tombstone_is_an_empty_view() -> None:
    tombstone = orjson.dumps(
        Tombstone(
            session_token=session_token(SESSION), purged_through=9, forgotten_at=AT
        ).model_dump()
    )
    for value in (None, b"", tombstone):
        gateway = Gateway()
        outcome = await handle_runtime_event(
            truncated(), default_config(), gateway, Bucket(value), LastReplies()
        )
        assert outcome == ACK
        ((_, command),) = gateway.sent
        assert command["view_seq"] == 0


async def test_a_view_older_than_min_seq_is_read_again_until_it_covers_it() -> None:
    replies = LastReplies()
    replies.put(SESSION, 5)
    bucket, gateway = Bucket(state(3), state(4), state(5)), Gateway()
    outcome = await handle_runtime_event(truncated(), default_config(), gateway, bucket, replies)
    assert outcome == ACK
    assert bucket.seen == 3
    ((_, command),) = gateway.sent
    assert command["view_seq"] == 5


async def test_a_view_still_older_than_min_seq_after_the_wait_is_redelivered_later() -> None:
    replies = LastReplies()
    replies.put(SESSION, 5)
    bucket, gateway = Bucket(state(4)), Gateway()
    outcome = await handle_runtime_event(
        truncated(), default_config(), gateway, bucket, replies, wait_s=0.05
    )
    assert outcome == retry(0.5)
    assert gateway.sent == []


async def test_no_free_place_to_wait_for_the_view_is_redelivered_later() -> None:
    class Full(Bucket):
        async def until(
            self, token: str, ready: Callable[[Projected], bool], timeout_s: float
        ) -> tuple[Projected, bool]:
            raise TooManyWaiting(token)

    replies = LastReplies()
    replies.put(SESSION, 5)
    gateway = Gateway()
    outcome = await handle_runtime_event(truncated(), default_config(), gateway, Full(), replies)
    assert outcome == retry(0.5)
    assert gateway.sent == []


async def test_a_failed_or_unreadable_read_is_retried_and_never_dropped() -> None:
    for value in (TimeoutError(), b"not json", b'{"session_seq": "x"}'):
        gateway = Gateway()
        outcome = await handle_runtime_event(
            truncated(), default_config(), gateway, Bucket(value), LastReplies()
        )
        assert outcome == retry()
        assert gateway.sent == []


async def test_the_evaluate_reply_settles_as_before() -> None:
    cases: list[tuple[dict[str, Any] | Exception, Any]] = [
        (TimeoutError(), retry()),
        ({"ok": False, "error": {"code": "conflict"}}, retry()),
        ({"ok": False, "error": {"code": "invalid_request"}}, None),
    ]
    for reply, expected in cases:
        replies = LastReplies()
        outcome = await handle_runtime_event(
            truncated(), default_config(), Gateway(reply), Bucket(state(1)), replies
        )
        if expected is None:
            assert outcome == dead_letter("invalid_request", "the gateway refused the evaluation")
        else:
            assert outcome == expected
        assert replies.get(SESSION) is None


def busy() -> SessionState:
    """A session with live reminders, a turn, and the gateway's full window of remembered
    replies (each inject sent with a request id)."""
    driver = Driver(SESSION)
    for n in range(260):
        driver.ok("inject", request_id=f"r-{n}", reminder={"body": f"n {n}", "dedupe_key": "k"})
    driver.ok("end_turn", turn=1)
    assert len(driver.state.recent_replies) == 256 and driver.state.pending
    return driver.state


@pytest.mark.parametrize("keep_parsed", [False, True])
async def test_the_view_is_the_sessions_state_without_the_remembered_replies(
    keep_parsed: bool,
) -> None:
    full = busy()
    bucket = Bucket(encode_state(full), keep_parsed=keep_parsed)
    view, stale = await read_view(SESSION, bucket, full.session_seq)
    assert not stale
    assert view.recent_replies == []
    assert view == full.model_copy(update={"recent_replies": []})


async def test_remembered_replies_are_not_validated_for_a_view_and_the_rest_is() -> None:
    raw = orjson.loads(encode_state(busy()))
    raw["recent_replies"] = [{"not": "a remembered reply"}]
    view, _ = await read_view(SESSION, Bucket(orjson.dumps(raw)), 0)
    assert view.recent_replies == [] and view.pending
    raw["pending"] = [{"not": "a pending row"}]
    with pytest.raises(ValueError):
        await read_view(SESSION, Bucket(orjson.dumps(raw)), 0)


def test_a_record_builds_the_same_model_from_its_parse_as_from_its_bytes() -> None:
    value = encode_state(busy())
    kept, unkept = read_projected(value, keep_parsed=True), read_projected(value)
    assert kept.parsed is not None and unkept.parsed is None
    assert kept.session_state() == unkept.session_state() == SessionState.model_validate_json(value)
    left_out = {"recent_replies", "seen_ids"}
    assert kept.session_state(left_out) == unkept.session_state(left_out)
    assert kept.session_state(left_out) is not None


def test_a_plug_in_sees_the_state_without_the_remembered_replies_and_nothing_else_missing() -> None:
    seen: list[SessionState] = []

    def plugin(view: SessionState, event: RuntimeEvent, config: Mapping[str, Any]) -> object:
        seen.append(view)
        return None

    replies = [RecentReply(request_id=f"r-{n}", reply={"ok": True}) for n in range(3)]
    state = SessionState(session_id=SESSION, turn=4, session_seq=9, recent_replies=replies)
    evaluate_event(state, truncated(), build_config({"providers": ["mine"]}, {"mine": plugin}))
    assert {"recent_replies"} == NOT_IN_VIEW
    # Left empty is left at the default: each is a list, empty unless something was recorded.
    assert all(getattr(SessionState(), name) == [] for name in NOT_IN_VIEW)
    assert seen == [state.model_copy(update={"recent_replies": []})]
    assert provider_view(state) == seen[0]
    # A state without replies is the view as it is (no copy).
    bare = SessionState(session_id=SESSION, turn=4)
    assert provider_view(bare) is bare
