"""SPEC §7.1: one session's read follows its back-pointers when the stream is large, and gives
exactly what a subject-filtered scan gives; when a back-pointer does not hold, it scans."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client

from contracts import session_index
from contracts.events import Event
from contracts.session_index import EMPTY_INDEX, SessionIndex
from contracts.state import SessionState
from contracts.subjects import event_subject, session_subject_filter
from core import fold_all, handle
from services.adapters import session_read, session_walk
from services.adapters.append import SessionAppend, encode_event, publish_atomic
from services.adapters.session_read import RawStored, read_session, session_messages
from services.adapters.settings import Settings
from tests.support import context_for


def commands(session_id: str, turns: int) -> list[tuple[Event, ...]]:
    """A session's commands (inject, render, end_turn per turn), each one's events as decided."""
    state, decided, n = SessionState(), [], 0
    for turn in range(turns):
        for op, fields in (
            ("inject", {"reminder": {"body": f"note {turn}", "ttl_turns": 2}}),
            ("render", {"turn": turn}),
            ("end_turn", {"turn": turn}),
        ):
            n += 1
            decision = handle(state, op, {"session_id": session_id, **fields}, context_for(n))
            state = fold_all(state, decision.events)
            decided.append(decision.events)
    return decided


async def interleave(
    nc: Client, sessions: dict[str, list[tuple[Event, ...]]], indexed: bool = False
) -> None:
    """Round by round, one atomic batch holding every session's next command; `indexed`:
    each append with the session's index header, as the gateway writes it."""
    last: dict[str, int] = {}
    indexes: dict[str, SessionIndex | None] = {}
    for round_ in range(max(len(c) for c in sessions.values())):
        appends = [
            SessionAppend(
                session_id,
                last.get(session_id, 0),
                decided[round_],
                index=indexes.get(session_id, EMPTY_INDEX) if indexed else None,
            )
            for session_id, decided in sessions.items()
            if round_ < len(decided)
        ]
        seq = await publish_atomic(nc, appends, f"round-{round_}")
        first = seq - sum(len(a.events) for a in appends) + 1
        for append in appends:
            first += len(append.events)
            last[append.session_id] = first - 1
            indexes[append.session_id] = append.stored(first - 1)


async def scanned(nc: Client, stream: str, session_id: str, after_seq: int = 0) -> list[int]:
    filter_ = session_subject_filter(session_id)
    return [
        raw.stream_seq async for raw in session_read.iterate_direct(nc, stream, filter_, after_seq)
    ]


@pytest.fixture
def walk_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read walks, however small the stream, with short walks (more anchors)."""
    monkeypatch.setattr(session_read, "SCAN_SKIP_LIMIT", -1)
    monkeypatch.setattr(session_walk, "CHAIN_LANE_LENGTH", 2)


def no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*_: Any, **__: Any) -> AsyncIterator[RawStored]:
        raise AssertionError("scanned instead of walking")
        yield  # pragma: no cover

    monkeypatch.setattr(session_read, "iterate_direct", refuse)


@pytest.mark.usefixtures("walk_always")
async def test_walking_a_session_gives_what_a_scan_gives(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = {f"noise-{n}": commands(f"noise-{n}", 3) for n in range(12)}
    sessions["walked"] = commands("walked", 5)
    await interleave(nc, sessions)
    stream = provisioned.stream
    whole = await scanned(nc, stream, "walked")
    tail = await scanned(nc, stream, "walked", whole[6])
    assert len(whole) == sum(len(events) for events in sessions["walked"])
    # Only a whole session is walked: the new events after a read are scanned for.
    stored = await read_session(nc, stream, "walked", whole[6])
    assert [item.stream_seq for item in stored] == tail
    assert [item.envelope["session_seq"] for item in stored] == list(range(8, len(whole) + 1))
    no_scan(monkeypatch)
    messages, sent = await session_messages(nc, stream, "walked")
    assert [raw.stream_seq for raw in messages] == whole
    assert [raw.pending for raw in messages] == list(range(len(whole) - 1, -1, -1))
    assert sent >= len(whole)
    assert [item.stream_seq for item in await read_session(nc, stream, "walked")] == whole
    assert await read_session(nc, stream, "nobody") == []


@pytest.mark.usefixtures("walk_always")
async def test_a_message_without_its_back_pointer_makes_the_read_scan(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = {f"noise-{n}": commands(f"noise-{n}", 2) for n in range(6)}
    decided = commands("patchy", 4)
    sessions["patchy"] = decided[:6]
    await interleave(nc, sessions)
    await interleave(nc, {f"late-{n}": commands(f"late-{n}", 1) for n in range(3)})
    # A writer that sets no expectation (not the gateway), after other sessions' events: its
    # message points nowhere the chain can vouch for.
    stray = decided[6][0]
    await nc.jetstream().publish(event_subject(stray.kind, "patchy"), encode_event(stray))
    await interleave(nc, {f"later-{n}": commands(f"later-{n}", 1) for n in range(3)})
    stream = provisioned.stream
    whole = await scanned(nc, stream, "patchy")
    messages, _ = await session_messages(nc, stream, "patchy")
    assert [raw.stream_seq for raw in messages] == whole
    assert len(whole) == sum(len(events) for events in decided[:6]) + 1
    no_scan(monkeypatch)
    with pytest.raises(AssertionError, match="scanned instead of walking"):
        await session_messages(nc, stream, "patchy")


def no_back_pointer_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*_: Any) -> None:
        raise AssertionError("walked the back-pointers instead of the index")

    monkeypatch.setattr(session_read, "walk_session", refuse)


async def indexed_among_noise(
    nc: Client, stream: str, session_id: str, turns: int, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """The session's `turns` and other sessions' commands interleaved, every append with its
    index at a fan-out of two (so a few appends make it deep); the session's stream seqs."""
    monkeypatch.setattr(session_index, "FANOUT", 2)
    sessions = {f"noise-{n}": commands(f"noise-{n}", 2) for n in range(6)}
    sessions[session_id] = commands(session_id, turns)
    await interleave(nc, sessions, indexed=True)
    return await scanned(nc, stream, session_id)


@pytest.mark.usefixtures("walk_always")
async def test_an_indexed_session_is_read_through_its_index(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Six turns are 18 appends: an index four levels deep.
    stream = provisioned.stream
    whole = await indexed_among_noise(nc, stream, "indexed", 6, monkeypatch)
    no_scan(monkeypatch)
    no_back_pointer_walk(monkeypatch)
    messages, sent = await session_messages(nc, stream, "indexed")
    assert [raw.stream_seq for raw in messages] == whole
    assert sent == len(whole)  # each event asked for once
    stored = await read_session(nc, stream, "indexed")
    assert [item.envelope["session_seq"] for item in stored] == list(range(1, len(whole) + 1))


@pytest.mark.usefixtures("walk_always")
async def test_an_index_that_does_not_lead_to_the_session_makes_the_read_walk(
    nc: Client, provisioned: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = provisioned.stream
    whole = await indexed_among_noise(nc, stream, "misled", 3, monkeypatch)
    # The next append's index names another session's message as one of this session's.
    noise = (await scanned(nc, stream, "noise-0"))[-1]
    wrong = SessionIndex(((noise, 1),), ())
    decided = commands("misled", 4)[9]
    await publish_atomic(nc, [SessionAppend("misled", whole[-1], decided, index=wrong)], "x")
    whole = await scanned(nc, stream, "misled")
    no_scan(monkeypatch)
    messages, _ = await session_messages(nc, stream, "misled")
    assert [raw.stream_seq for raw in messages] == whole
    no_back_pointer_walk(monkeypatch)
    with pytest.raises(AssertionError, match="walked the back-pointers"):
        await session_messages(nc, stream, "misled")
