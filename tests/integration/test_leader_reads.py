"""The reads that must come from a stream's leader (`STREAM.MSG.GET`), on a real server:
a session's last event, and its first event after a sequence (the projector's test of
whether a gap's missing events are in the log)."""

from __future__ import annotations

from nats.aio.client import Client

from contracts.subjects import EVENT_PREFIX
from services.adapters.session_read import leader_first_after, leader_last_session_seq
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
