"""The reads that must come from a stream's leader (`STREAM.MSG.GET`), on a real server:
a session's last event, its first event after a sequence (the projector's test of
whether a gap's missing events are in the log), and its events between two sequences (what
the projector reads to fill a gap)."""

from __future__ import annotations

from nats.aio.client import Client

from contracts.subjects import EVENT_PREFIX
from services.adapters.session_read import (
    leader_first_after,
    leader_last_session_seq,
    leader_messages_between,
)
from services.adapters.settings import Settings


async def test_first_after_and_last_of_a_session(nc: Client, provisioned: Settings) -> None:
    js = nc.jetstream()
    seqs: dict[str, list[int]] = {"a": [], "b": []}
    for n in range(6):
        token = "ab"[n % 2]
        ack = await js.publish(f"{EVENT_PREFIX}.injected.{token}", b"{}")
        seqs[token].append(ack.seq)
    a = f"{EVENT_PREFIX}.*.a"
    assert await leader_first_after(nc, provisioned.stream, a, 0) == seqs["a"][0]
    assert await leader_first_after(nc, provisioned.stream, a, seqs["a"][0]) == seqs["a"][1]
    assert await leader_first_after(nc, provisioned.stream, a, seqs["a"][0] + 1) == seqs["a"][1]
    assert await leader_first_after(nc, provisioned.stream, a, seqs["a"][-1]) is None
    assert await leader_first_after(nc, provisioned.stream, f"{EVENT_PREFIX}.*.c", 0) is None
    assert await leader_last_session_seq(nc, provisioned.stream, "b") == seqs["b"][-1]


async def test_the_messages_of_a_session_between_two_seqs(
    nc: Client, provisioned: Settings
) -> None:
    js = nc.jetstream()
    seqs: dict[str, list[int]] = {"a": [], "b": []}
    for n in range(10):
        token = "ab"[n % 2]
        ack = await js.publish(f"{EVENT_PREFIX}.fired.{token}", f'{{"n":{n}}}'.encode())
        seqs[token].append(ack.seq)
    a = f"{EVENT_PREFIX}.*.a"
    found = await leader_messages_between(nc, provisioned.stream, a, seqs["a"][0], seqs["a"][4], 10)
    assert [raw.stream_seq for raw in found] == seqs["a"][1:4]
    assert [raw.data for raw in found] == [b'{"n":2}', b'{"n":4}', b'{"n":6}']
    assert {raw.subject for raw in found} == {f"{EVENT_PREFIX}.fired.a"}
    limited = await leader_messages_between(nc, provisioned.stream, a, 0, 10**9, 2)
    assert [raw.stream_seq for raw in limited] == seqs["a"][:2]
    assert await leader_messages_between(nc, provisioned.stream, a, seqs["a"][-1], 10**9, 5) == []
