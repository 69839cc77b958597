"""SPEC §3.4: a command's events land all or none; one session's conflict fails no other."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from nats.aio.client import Client

from contracts.events import Event
from contracts.state import SessionState
from core import fold_all, handle
from core.canonical import event_subject
from services.adapters.append import SessionAppend, encode_event, publish_atomic
from services.adapters.jetstream import (
    H_BATCH_COMMIT,
    H_BATCH_ID,
    H_BATCH_SEQ,
    H_MSG_ID,
    JetStreamApiError,
)
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from services.gateway.committer import CommitConflict, GroupCommitter
from tests.support import context_for


def decided(session_id: str, op: str, n: int = 1, **fields: object) -> tuple[Event, ...]:
    """Events a command decides against an empty session."""
    decision = handle(SessionState(), op, {"session_id": session_id, **fields}, context_for(n))
    assert decision.ok, decision.reply
    return decision.events


def render_batch(session_id: str) -> tuple[Event, ...]:
    """A multi-event command: three injects folded, then a render (fired×3 + delivered)."""
    state = SessionState()
    for n in range(3):
        state = fold_all(
            state, decided(session_id, "inject", n + 1, reminder={"body": f"b{n}", "id": f"r{n}"})
        )
    decision = handle(state, "render", {"session_id": session_id, "turn": 0}, context_for(9))
    return decision.events


async def stream_messages(nc: Client, settings: Settings) -> int:
    info = await nc.jetstream().stream_info(settings.stream)
    return int(info.state.messages)


async def test_a_batch_interrupted_between_messages_stores_nothing(
    nc: Client, provisioned: Settings
) -> None:
    events = render_batch("torn")[-4:]
    # The writer dies after two of four messages: no commit message is ever sent.
    for position, event in enumerate(events[:2], start=1):
        await nc.publish(
            event_subject(event.kind, event.session_id),
            encode_event(event),
            headers={
                H_MSG_ID: event.event_id,
                H_BATCH_ID: "torn-batch",
                H_BATCH_SEQ: str(position),
            },
        )
    await nc.flush()
    assert await stream_messages(nc, provisioned) == 0
    # A late commit of a batch that lost its middle is refused too.
    late = events[3]
    reply = await nc.request(
        event_subject(late.kind, late.session_id),
        encode_event(late),
        headers={
            H_MSG_ID: late.event_id,
            H_BATCH_ID: "torn-batch",
            H_BATCH_SEQ: "4",
            H_BATCH_COMMIT: "1",
        },
        timeout=5,
    )
    assert "error" in orjson.loads(reply.data)
    assert await stream_messages(nc, provisioned) == 0


async def test_a_wrong_expectation_rejects_the_whole_batch(
    nc: Client, provisioned: Settings
) -> None:
    good = SessionAppend("a", 0, decided("a", "inject", reminder={"body": "x"}))
    stale = SessionAppend("b", 7, decided("b", "inject", reminder={"body": "y"}))
    with pytest.raises(JetStreamApiError) as caught:
        await publish_atomic(nc, [good, stale], "mixed-batch")
    assert caught.value.err_code == 10071
    assert await stream_messages(nc, provisioned) == 0


async def test_a_multi_event_command_lands_contiguously_in_one_batch(
    nc: Client, provisioned: Settings
) -> None:
    events = render_batch("whole")
    last = await publish_atomic(nc, [SessionAppend("whole", 0, events)], "whole-batch")
    stored = await read_session(nc, provisioned.stream, "whole")
    assert [item.stream_seq for item in stored] == list(range(last - len(events) + 1, last + 1))
    assert [item.envelope["event_id"] for item in stored] == [e.event_id for e in events]


async def test_one_sessions_conflict_in_a_group_fails_no_other_sessions_command(
    nc: Client, provisioned: Settings
) -> None:
    committer = GroupCommitter(nc)
    appends = [
        SessionAppend(
            f"s{n}", 0 if n != 2 else 99, decided(f"s{n}", "inject", reminder={"body": "x"})
        )
        for n in range(5)
    ]
    # Queue every command before the loop runs, so they form one group.
    tasks = [asyncio.create_task(committer.commit(append)) for append in appends]
    await asyncio.sleep(0)
    committer.start()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    await committer.stop()
    assert isinstance(results[2], CommitConflict)
    assert [isinstance(result, list) for result in results] == [True, True, False, True, True]
    for n in (0, 1, 3, 4):
        assert len(await read_session(nc, provisioned.stream, f"s{n}")) == 1
    assert await read_session(nc, provisioned.stream, "s2") == []


async def test_commands_of_different_sessions_share_one_atomic_batch(
    nc: Client, provisioned: Settings
) -> None:
    committer = GroupCommitter(nc)
    appends = [
        SessionAppend(f"g{n}", 0, decided(f"g{n}", "inject", reminder={"body": "x"}))
        for n in range(20)
    ]
    tasks = [asyncio.create_task(committer.commit(append)) for append in appends]
    await asyncio.sleep(0)
    committer.start()
    seqs = await asyncio.gather(*tasks)
    await committer.stop()
    assert sorted(seq for group in seqs for seq in group) == list(range(1, 21))
    js = nc.jetstream()
    batch_ids = {
        (await js.get_msg(provisioned.stream, seq)).headers["Nats-Batch-Id"]  # type: ignore[index]
        for seq in range(1, 21)
    }
    assert len(batch_ids) == 1


async def test_a_duplicate_publish_with_the_same_msg_id_changes_nothing(
    nc: Client, provisioned: Settings
) -> None:
    events = decided("dup", "inject", reminder={"body": "x"})
    await publish_atomic(nc, [SessionAppend("dup", 0, events)], "first")
    js = nc.jetstream()
    ack = await js.publish(
        event_subject(events[0].kind, "dup"),
        encode_event(events[0]),
        headers={H_MSG_ID: events[0].event_id},
    )
    assert ack.duplicate is True
    with pytest.raises(JetStreamApiError) as caught:
        await publish_atomic(nc, [SessionAppend("dup", 1, events)], "again")
    assert caught.value.err_code == 10201
    assert await stream_messages(nc, provisioned) == 1
