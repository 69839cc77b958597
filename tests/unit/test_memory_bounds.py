"""What a long-running service holds stays bounded (issue #23, the soak): the fold's table of
remembered replies' sizes holds no row every state has dropped, and the gateway's session
cache is bounded in bytes of encoded state as well as in sessions, and its read of a session it
has not cached holds one decoded event at a time, not the whole history; its active-sessions
gauge forgets quiet sessions whether or not anyone reads it."""

from __future__ import annotations

import gc
import importlib
import tracemalloc
from typing import Any, cast

from bench.traffic import decide_session
from contracts.spec import ResolvedSpec, parse_reminder
from contracts.state import DeliveredEnvelope, RecentReply, SessionState
from core import fold_all
from core.size import (
    _SPEC_BYTES,
    MEMO_TEXT_CHARS,
    SPEC_SKELETON_BYTES,
    MeasuredOnce,
    _short_stored_bytes,
    spec_bytes,
    stored_bytes,
)
from services.adapters.session_read import RawStored
from services.adapters.settings import Settings
from services.gateway.command import CachedSession
from services.gateway.service import (
    ACTIVE_WINDOW_S,
    CommandService,
    RateLimiter,
    _decoded,
)
from services.gateway.session_cache import (
    EVENT_ALLOWANCE_BYTES,
    REMEASURE_BYTES_PER_EVENT,
    SessionCache,
    encoded_bytes,
)

fold_module = importlib.import_module("core.fold")
kept_module = importlib.import_module("core.kept")


def _rows(count: int, prefix: str = "r") -> list[RecentReply]:
    return [
        RecentReply(request_id=f"{prefix}{i}", reply={"ok": True, "session_seq": i})
        for i in range(count)
    ]


def test_reply_sizes_are_remembered_only_while_their_rows_live() -> None:
    before = len(fold_module._ROW_BYTES.table)
    rows = _rows(300)
    fold_module._evict_replies(rows)  # the oldest beyond RECENT_REPLIES_KEPT go unmeasured
    assert len(fold_module._ROW_BYTES.table) == before + len(rows)
    del rows[:100]
    assert len(fold_module._ROW_BYTES.table) == before + len(rows)
    rows.clear()
    gc.collect()
    assert len(fold_module._ROW_BYTES.table) == before


def test_a_remembered_size_is_the_rows_own_after_its_id_is_reused() -> None:
    (short,) = _rows(1)
    fold_module._evict_replies([short])
    key = id(short)
    del short
    long = RecentReply(request_id="x" * 500, reply={"ok": True})
    # Whether or not CPython hands the same address out again, the size is the new row's.
    assert fold_module._ROW_BYTES(long) > 500
    table = fold_module._ROW_BYTES.table
    assert key not in table or table[key][0]() is long


def _state(session_id: str, replies: int) -> SessionState:
    return SessionState(session_id=session_id, recent_replies=_rows(replies, session_id))


def test_the_session_cache_evicts_the_least_recent_beyond_its_bytes() -> None:
    states = {name: _state(name, 20) for name in ("a", "b", "c")}
    one = encoded_bytes(states["a"])
    cache = SessionCache(capacity=100, capacity_bytes=2 * one + one // 2)
    for name, state in states.items():
        assert cache.evictions == 0  # not full yet: nothing evicted
        cache.put(name, CachedSession(state, 1))
        assert cache.cached_bytes <= 2 * one + one // 2
    assert cache.get("a") is None
    assert cache.get("b") is not None and cache.get("c") is not None
    assert len(cache) == 2
    assert cache.evictions == 1  # full: the gauge that ends the soak's warm-up
    cache.put("c", CachedSession(states["c"], 2))  # replacing an entry evicts nothing
    assert cache.evictions == 1
    cache.drop("b")
    assert cache.cached_bytes == encoded_bytes(states["c"])


def test_the_session_cache_still_bounds_the_count() -> None:
    cache = SessionCache(capacity=2, capacity_bytes=1 << 30)
    for name in ("a", "b", "c"):
        cache.put(name, CachedSession(_state(name, 1), 1))
    assert len(cache) == 2 and cache.get("a") is None


def test_a_state_folded_further_is_charged_per_event_then_measured_again() -> None:
    small, large = _state("s", 40), _state("s", 80)
    measured = encoded_bytes(small)
    cache = SessionCache(capacity=10, capacity_bytes=1 << 30)
    cache.put("s", CachedSession(small, 1))
    assert cache.cached_bytes == measured
    # Fewer events than one per REMEASURE_BYTES_PER_EVENT of the measure: charged, not measured.
    within = measured // REMEASURE_BYTES_PER_EVENT
    assert within >= 1
    cache.put("s", CachedSession(large, 2), within)
    assert cache.cached_bytes == measured + within * EVENT_ALLOWANCE_BYTES
    cache.put("s", CachedSession(large, 3), 1)
    assert cache.cached_bytes == encoded_bytes(large)
    # Read from the log (no count of folded events): measured at once.
    cache.put("s", CachedSession(small, 4))
    assert cache.cached_bytes == measured


def test_a_zero_bound_caches_nothing() -> None:
    for cache in (SessionCache(0, 1 << 20), SessionCache(10, 0)):
        cache.put("a", CachedSession(_state("a", 1), 1))
        assert cache.get("a") is None and cache.cached_bytes == 0


def _stored_session(commands: int) -> list[RawStored]:
    events = [e for batch in decide_session("s-long", list(range(commands))) for e in batch]
    return [
        RawStored(event.model_dump_json(by_alias=True).encode(), seq, f"x.{seq}", 0)
        for seq, event in enumerate(events, start=1)
    ]


def test_a_session_read_folds_one_event_at_a_time_and_keeps_only_those_asked_for() -> None:
    messages = _stored_session(600)
    stored_bytes = sum(len(raw.data) for raw in messages)
    count = len(messages)
    kept: list = []
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        state = fold_all(SessionState(), _decoded(messages, count - 3, kept))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Every message let go once folded; the last three events kept, with their seqs.
    assert messages == []
    assert [seq for _, seq in kept] == [count - 2, count - 1, count]
    assert state.session_id == "s-long"
    # Decoded all at once, the history is several times its stored bytes; one at a time, the
    # peak is the state and a few events.
    assert peak - base < stored_bytes


def test_a_session_read_for_its_state_alone_keeps_no_event() -> None:
    kept: list = []
    fold_all(SessionState(), _decoded(_stored_session(20), None, kept))
    assert kept == []


def test_the_active_sessions_gauge_forgets_quiet_sessions_even_unread() -> None:
    service = CommandService(cast(Any, None), Settings.from_env({}), cast(Any, None))
    for n in range(1000):
        service._seen(f"s{n}", float(n))
    # Nobody read the gauge: still only the sessions of the last window are held.
    assert len(service._last_seen) == int(ACTIVE_WINDOW_S) + 1
    assert next(iter(service._last_seen)) == f"s{999 - int(ACTIVE_WINDOW_S)}"
    service._seen("s0", 1000.0)  # a session seen again moves to the newest end
    assert list(service._last_seen)[-1] == "s0"


def test_long_texts_are_measured_without_a_table_that_keeps_them() -> None:
    long = "é" * (MEMO_TEXT_CHARS + 1)
    assert stored_bytes(long) == 2 * len(long)
    assert stored_bytes('a"b') == 4  # a short one, escaped quote and all
    before = _short_stored_bytes.cache_info().currsize
    stored_bytes("x" * (MEMO_TEXT_CHARS + 10))
    assert _short_stored_bytes.cache_info().currsize == before
    stored_bytes(f"short {before}")
    assert _short_stored_bytes.cache_info().currsize == before + 1


def test_delivered_texts_and_specs_are_measured_once_per_live_object() -> None:
    text_memo = kept_module.TEXT_BYTES
    row = DeliveredEnvelope(
        turn_number=1,
        speaker="harness",
        directive_ids=[],
        text="t" * 1000,
        format="system-reminder",
        nonce=None,
    )
    before = len(text_memo.table)
    assert text_memo(row) == 1000 and len(text_memo.table) == before + 1
    del row
    gc.collect()
    assert len(text_memo.table) == before
    spec = ResolvedSpec.resolve(parse_reminder({"body": "b" * 600})[0], id="r1", fired_at_turn=0)
    first = spec_bytes(spec)
    assert first == SPEC_SKELETON_BYTES + 600 + 2
    held = len(_SPEC_BYTES.table)
    assert spec_bytes(spec) == first and len(_SPEC_BYTES.table) == held
    del spec
    gc.collect()
    assert len(_SPEC_BYTES.table) == held - 1


def test_measured_once_measures_each_object_once() -> None:
    calls: list[int] = []

    def measure(row: RecentReply) -> int:
        calls.append(1)
        return len(row.request_id)

    memo: MeasuredOnce[RecentReply] = MeasuredOnce(measure)
    (row,) = _rows(1, "abc")
    assert memo(row) == memo(row) == 4 and len(calls) == 1


def test_many_gives_what_each_object_gives_in_order_working_out_only_the_new_ones() -> None:
    calls: list[str] = []

    def measure(row: RecentReply) -> int:
        calls.append(row.request_id)
        return len(row.request_id)

    memo: MeasuredOnce[RecentReply] = MeasuredOnce(measure)
    rows = _rows(3, "abc")
    assert memo.many(rows[:2]) == [len(row.request_id) for row in rows[:2]]
    assert memo.many(rows) == memo.many(rows) == [len(row.request_id) for row in rows]
    assert calls == [row.request_id for row in rows]  # each once
    assert memo.many([]) == []

    class Counted(MeasuredOnce[RecentReply]):
        calls = 0

        def __call__(self, item: RecentReply) -> int:
            self.calls += 1
            return super().__call__(item)

    counted = Counted(measure)
    assert counted.many(rows[:2]) == memo.many(rows[:2]) and counted.calls == 2
    assert counted.many(rows) == memo.many(rows) and counted.calls == 3  # only the new one
    assert counted.many(rows) == memo.many(rows) and counted.calls == 3  # none: one lookup each
    del rows
    gc.collect()
    assert memo.table == {}


def test_take_gives_what_was_kept_for_the_object_and_keeps_it_no_longer() -> None:
    memo: MeasuredOnce[RecentReply] = MeasuredOnce(lambda row: len(row.request_id))
    first, second = _rows(2, "abc")
    memo.put(first, 99)  # worked out elsewhere: not what the memo's own work-out gives
    assert memo.take(second) is None  # nothing kept for it: nothing worked out either
    assert memo.known(second) is None
    assert memo.take(first) == 99
    assert memo.known(first) is None and memo.take(first) is None


def test_the_rate_limiter_holds_only_sessions_with_a_command_in_the_last_second() -> None:
    limiter = RateLimiter(limit=2, max_sessions=1000)
    for n in range(500):
        assert limiter.retry_after_ms(f"s{n}", n * 0.01) == 0
    # Only the sessions of the last second are held (100 of them, one command each).
    assert len(limiter._windows) == 100
    assert limiter.retry_after_ms("s499", 4.99) == 0
    assert limiter.retry_after_ms("s499", 4.99) > 0  # over its limit: refused, still held
    assert "s499" in limiter._windows
    tight = RateLimiter(limit=5, max_sessions=10)
    for n in range(50):
        tight.retry_after_ms(f"t{n}", 0.0)
    assert list(tight._windows) == [f"t{n}" for n in range(40, 50)]
