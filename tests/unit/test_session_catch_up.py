"""A cached session behind the log is caught up from what follows it, checked against the
log's count of the session's messages; anything that does not continue it exactly is read
whole (`services.gateway.session_cache`)."""

from __future__ import annotations

import pytest

from contracts.events import Event
from contracts.state import SessionState
from core import fold_all
from services.adapters.session_read import RawStored
from services.gateway.command import CachedSession
from services.gateway.session_cache import ReplicaBehind, SessionCache, ShorterLog, caught_up
from tests.support import Driver

#: Another session's events are stored between this one's: stream seqs step by this.
STRIDE = 3


def history(events: int = 8) -> list[Event]:
    driver = Driver("s1")
    while len(driver.log) < events:
        driver.inject(f"note {len(driver.log)}")
    return driver.log[:events]


def stored(events: list[Event]) -> list[RawStored]:
    return [
        RawStored(event.model_dump_json(by_alias=True).encode(), STRIDE * (index + 1), "x", 0)
        for index, event in enumerate(events)
    ]


def cached(events: list[Event]) -> CachedSession:
    rows = stored(events)
    return CachedSession(
        fold_all(SessionState(), [(e, r.stream_seq) for e, r in zip(events, rows, strict=True)]),
        rows[-1].stream_seq if rows else 0,
    )


def test_the_events_after_the_cached_state_are_folded_onto_it() -> None:
    log = history()
    base = cached(log[:5])
    result = caught_up(base, stored(log)[5:], count=len(log), events_after=None)
    assert result is not None
    entry, kept = result
    assert entry == cached(log)
    assert kept == []


def test_after_an_unknown_outcome_the_events_past_the_decided_seq_are_kept() -> None:
    log = history()
    base = cached(log[:5])
    rows = stored(log)
    decided_on = rows[3].stream_seq  # an earlier attempt decided on an older state
    result = caught_up(base, rows[4:], count=len(log), events_after=decided_on)
    assert result is not None
    entry, kept = result
    assert entry == cached(log)
    assert [seq for _, seq in kept] == [row.stream_seq for row in rows[4:]]


def test_nothing_new_keeps_the_cached_state() -> None:
    log = history()
    base = cached(log)
    assert caught_up(base, [], count=len(log), events_after=None) == (base, [])


def test_a_log_that_does_not_continue_the_cached_state_is_read_whole() -> None:
    log = history()
    base = cached(log[:5])
    rows = stored(log)
    # A message missing from the tail, a new life's events, an unreadable message.
    assert caught_up(base, rows[6:], count=len(log), events_after=None) is None
    new_life = [RawStored(r.data, r.stream_seq + 100, "x", 0) for r in stored(log[:2])]
    assert caught_up(base, new_life, count=2, events_after=None) is None
    garbage = RawStored(b"not an event", rows[5].stream_seq, "x", 0)
    assert caught_up(base, [garbage, *rows[6:]], count=len(log), events_after=None) is None


def test_a_tail_that_continues_exactly_but_stops_short_of_the_count_is_read_again() -> None:
    # The replica that answered is behind the leader that counted: a whole read from it
    # would be as far behind.
    log = history()
    base = cached(log[:5])
    rows = stored(log)
    with pytest.raises(ReplicaBehind):
        caught_up(base, rows[5:], count=len(log) + 1, events_after=None)
    with pytest.raises(ReplicaBehind):
        caught_up(base, rows[5:7], count=len(log), events_after=None)
    with pytest.raises(ReplicaBehind):
        caught_up(base, [], count=len(log), events_after=None)


def test_a_log_counting_fewer_messages_than_were_seen_is_told_to_the_caller() -> None:
    # A forgotten session, or a leader cut off from its cluster: the caller asks the quorum.
    log = history()
    base = cached(log[:5])
    rows = stored(log)
    with pytest.raises(ShorterLog):
        caught_up(base, rows[5:], count=len(log) - 1, events_after=None)
    with pytest.raises(ShorterLog):
        caught_up(base, [], count=2, events_after=None)


def test_an_entry_marked_behind_is_not_served_but_kept_to_catch_up_from() -> None:
    cache = SessionCache(capacity=10, capacity_bytes=1 << 20)
    log = history()
    entry = cached(log[:5])
    cache.put("s1", entry)
    cache.mark_behind("s1")
    assert cache.get("s1") is None
    assert cache.behind("s1") is entry
    newer = cached(log)
    cache.put("s1", newer, folded_events=3)
    assert cache.get("s1") is newer
    assert cache.behind("s1") is None
    cache.mark_behind("absent")  # nothing cached: nothing to mark
    assert cache.behind("absent") is None
