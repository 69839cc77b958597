"""The session index header (`contracts.session_index`, SPEC §7.1): what each append's last
message lists leads a reader, in a few rounds, to every earlier event of the session, and
every writer computes the same header from the session's appends alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import session_index
from contracts.session_index import (
    EMPTY_INDEX,
    FANOUT,
    MAX_HEADER_BYTES,
    MAX_LEVELS,
    IndexBuilder,
    SessionIndex,
    parse_index,
)
from core.size import HEADER_ALLOWANCE_BYTES, TRACE_HEADERS_MAX_BYTES

#: One stored append: (first seq, count, the header its last message carries).
Stored = tuple[int, int, str]


def store(counts: list[int], gap: int = 7) -> list[Stored]:
    """A session's appends of `counts` events each, `gap` other messages between two, each
    with the header written from the index before it (as the gateway writes them)."""
    stored: list[Stored] = []
    index: SessionIndex | None = EMPTY_INDEX
    seq = 1
    for count in counts:
        assert index is not None
        stored.append((seq, count, index.header(count)))
        index = index.after(seq, count)
        seq += count + gap
    return stored


def read(stored: list[Stored]) -> tuple[set[int], int]:
    """What a reader finds from the last message alone, and in how many rounds of gets: each
    round asks for everything the replies of the one before named (`walk_index`'s rule)."""
    headers = {first + count - 1: header for first, count, header in stored}
    first, count, header = stored[-1]
    found: set[int] = set(range(first, first + count))
    top = parse_index(header)
    runs = list(top.runs)
    expand = [(ref, depth) for depth, refs in enumerate(top.refs) for ref in refs]
    rounds = 1
    while runs or expand:
        rounds += 1
        for run_first, n in runs:
            found.update(range(run_first, run_first + n))
        found.update(ref for ref, _ in expand)
        runs, deeper = [], []
        for ref, depth in expand:
            parsed = parse_index(headers[ref])
            if depth == 0:
                runs += parsed.runs
            else:
                deeper += [(entry, depth - 1) for entry in parsed.refs_at(depth)]
        expand = deeper
    return found, rounds


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=700))
def test_the_last_message_leads_to_every_event_in_few_rounds(counts: list[int]) -> None:
    stored = store(counts)
    found, rounds = read(stored)
    assert found == {seq for first, n, _ in stored for seq in range(first, first + n)}
    levels = 1
    while FANOUT**levels < len(counts):
        levels += 1
    assert rounds <= levels + 2


@given(st.lists(st.integers(1, 5), min_size=0, max_size=300), st.integers(0, 3))
def test_any_writer_computes_the_index_from_the_appends_alone(counts: list[int], gap: int) -> None:
    stored = store(counts, gap)
    events = [(f"cmd-{n}", first + i) for n, (first, k, _) in enumerate(stored) for i in range(k)]
    incremental: SessionIndex | None = EMPTY_INDEX
    for first, count, header in stored:
        assert incremental is not None
        assert incremental.header(count) == header
        incremental = incremental.after(first, count)
    read = IndexBuilder()
    for command_id, seq in events:
        read.add(command_id, seq)
    assert read.index() == incremental


def test_the_header_reads_back_and_stays_within_its_bound() -> None:
    index = SessionIndex(((118, 2), (140, 1)), ((64, 97),))
    assert index.header(2) == "2;118:2,140:1;64,97"
    parsed = parse_index("2;118:2,140:1;64,97")
    assert (parsed.count, parsed.runs, parsed.refs) == (2, ((118, 2), (140, 1)), ((64, 97),))
    assert parse_index("3").runs == () and EMPTY_INDEX.header(3) == "3"
    big = 10**20 - 1
    widest = SessionIndex(
        tuple((big, 9999) for _ in range(FANOUT)),
        tuple(tuple(big for _ in range(FANOUT)) for _ in range(MAX_LEVELS - 1)),
    )
    assert len(widest.header(9999)) <= MAX_HEADER_BYTES
    # With the trace context at its most, an event's other headers still have room.
    assert MAX_HEADER_BYTES + TRACE_HEADERS_MAX_BYTES + 1024 <= HEADER_ALLOWANCE_BYTES


@pytest.mark.parametrize("value", ["", "0", "2;1:0", "2;x:1", "2;;07", "2;;²", "2;1"])
def test_a_value_that_is_not_an_index_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_index(value)


def test_past_its_depth_the_index_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_index, "FANOUT", 2)
    monkeypatch.setattr(session_index, "MAX_LEVELS", 3)
    index: SessionIndex | None = EMPTY_INDEX
    last = EMPTY_INDEX
    appended = 0
    while index is not None:
        last = index
        index = index.after(1 + appended, 1)
        appended += 1
    # Given up only when the top level is full and would need a level above it.
    assert len(last.refs) == 2 and len(last.refs[-1]) == 2
    read = IndexBuilder()
    for n in range(1, appended):
        read.add(f"cmd-{n}", n)
    assert read.index() == last
    read.add("one more", appended)
    assert read.index() is None
