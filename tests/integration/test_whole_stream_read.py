"""A whole-stream read asks for every message when the stream holds only the filter's
subjects (`iterate_direct(whole_stream=True)`, `replay.source.holds_only`): the same messages
in the same order as the filtered read, on a real server."""

from __future__ import annotations

import uuid

import pytest
from nats.aio.client import Client

from replay.source import EVENT_FILTER, holds_only
from services.adapters.session_read import iterate_direct
from services.adapters.settings import Settings


async def read(nc: Client, stream: str, subject_filter: str, whole: bool) -> list[tuple[int, str]]:
    return [
        (raw.stream_seq, raw.subject)
        async for raw in iterate_direct(nc, stream, subject_filter, batch=2, whole_stream=whole)
    ]


async def test_an_unfiltered_read_drops_what_the_filter_would_not_have_sent(nc: Client) -> None:
    stream = f"MIXED_{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream}.a.>", f"{stream}.b.>"], allow_direct=True)
    try:
        for subject in ("a.1", "b.1", "a.2", "b.2", "b.3", "a.3"):
            await js.publish(f"{stream}.{subject}", b"{}")
        filtered = await read(nc, stream, f"{stream}.a.>", whole=False)
        assert [subject for _, subject in filtered] == [f"{stream}.a.{n}" for n in (1, 2, 3)]
        assert await read(nc, stream, f"{stream}.a.>", whole=True) == filtered
        # This stream holds other subjects too: a whole-stream read of it asks the server to
        # filter.
        assert not await holds_only(nc, stream, f"{stream}.a.>")
    finally:
        await js.delete_stream(stream)


async def test_the_event_stream_as_provisioned_holds_only_the_events(
    nc: Client, provisioned: Settings
) -> None:
    assert await holds_only(nc, provisioned.stream, EVENT_FILTER)
    assert not await holds_only(nc, provisioned.stream, "transcript.reminder.injected.s-1")
    assert not await holds_only(nc, f"MISSING_{uuid.uuid4().hex[:8]}", EVENT_FILTER)


async def test_only_a_prefix_filter_can_be_read_whole(nc: Client) -> None:
    with pytest.raises(ValueError, match="prefix"):
        await read(nc, "ANY", "transcript.reminder.injected.s-1", whole=True)
