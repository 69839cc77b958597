"""The shared watch on the projection bucket (`services/adapters/projection.py`): it carries
headers only, so a gateway never receives the values nobody waits on, and a waiting read
still gets the value it waits for."""

from __future__ import annotations

import asyncio
import gc
import weakref

import orjson
from nats.aio.client import Client

from contracts.subjects import session_token
from services.adapters.projection import BucketReader, Projected
from services.adapters.records import READ_TIMEOUT_S
from services.adapters.settings import Settings
from services.gateway.queries import ProjectionReader


def state_value(session_seq: int, padding: int = 0) -> bytes:
    """A bucket value as far as a wait reads it (`Projected`): its sequences, and bulk."""
    return orjson.dumps(
        {
            "session_id": "s",
            "session_seq": session_seq,
            "stream_seq": session_seq,
            "pad": "x" * padding,
        }
    )


async def test_a_wait_gets_its_value_and_the_watch_carries_no_values(
    nc: Client, provisioned: Settings
) -> None:
    kv = await nc.jetstream().key_value(provisioned.kv_bucket)
    reader = BucketReader(nc, provisioned.kv_bucket, max_waiting=10, max_waiting_per_session=5)
    try:
        await kv.put("waited", state_value(1))

        def ready(record: Projected) -> bool:
            return record.session_seq >= 3

        waiting = asyncio.ensure_future(reader.wait("waited", ready, timeout_s=5.0))
        await asyncio.sleep(0.2)  # registered, watch started
        received_before = nc.stats["in_bytes"]
        for seq in range(20):  # large values of a key nobody waits on
            await kv.put("other", state_value(seq, padding=200_000))
        await kv.put("waited", state_value(2))
        await kv.put("waited", state_value(3))
        record = await asyncio.wait_for(waiting, 3.0)
        assert record.session_seq == 3
        # Twenty values of 200 kB went by the watch; headers only, it received a few kB.
        assert nc.stats["in_bytes"] - received_before < 100_000

        consumers = await nc.jetstream().consumers_info(f"KV_{provisioned.kv_bucket}")
        assert consumers and all(info.config.headers_only for info in consumers)
    finally:
        await reader.watch.stop()


async def test_a_waiting_query_holds_no_value(nc: Client, provisioned: Settings) -> None:
    """While a fault holds the projection back, every query waits at once: each keeps only
    its place, not the value it read (a hot session's is large), and reads its answer when
    the wait ends."""
    kv = await nc.jetstream().key_value(provisioned.kv_bucket)
    reader = ProjectionReader(nc, provisioned)
    read: list[weakref.ref[Projected]] = []
    get = reader._bucket.get

    async def tracked_get(token: str, timeout_s: float = READ_TIMEOUT_S) -> Projected:
        record = await get(token, timeout_s)
        read.append(weakref.ref(record))
        return record

    reader._bucket.get = tracked_get  # type: ignore[method-assign]
    token = session_token("held")
    try:
        await kv.put(token, state_value(1, padding=200_000))
        queries = [
            asyncio.ensure_future(reader.projected("held", min_seq=3, timeout_ms=5000))
            for _ in range(20)
        ]
        await asyncio.sleep(0.5)  # each has read twice (before and after registering)
        assert len(read) == 40 and reader.watch.waiting == 20
        gc.collect()
        assert [ref for ref in read if ref() is not None] == []
        await kv.put(token, state_value(3))
        answers = await asyncio.wait_for(asyncio.gather(*queries), 3.0)
        assert {(record.session_seq, stale) for record, stale in answers} == {(3, False)}
    finally:
        await reader.watch.stop()
