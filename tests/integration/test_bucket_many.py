"""The projection bucket's reads and writes of many keys at once (`KvSessionStore`), on a
real server: a multi-key direct get, and an atomic batch with each key's expected revision."""

from __future__ import annotations

import pytest
from nats.aio.client import Client

from services.adapters.records import MANY_LIMIT, KvSessionStore
from services.adapters.settings import Settings


async def bucket(nc: Client, settings: Settings) -> KvSessionStore:
    kv = await nc.jetstream().key_value(settings.kv_bucket)
    return KvSessionStore(kv, nc, settings.kv_bucket)


async def test_many_keys_read_at_once_read_as_one_at_a_time(
    nc: Client, provisioned: Settings
) -> None:
    store = await bucket(nc, provisioned)
    first = await store.write("a", b"A1", None)
    await store.write("b", b"B1", None)
    second = await store.write("a", b"A2", first)
    kv = await nc.jetstream().key_value(provisioned.kv_bucket)
    await kv.delete("b")
    found = await store.read_many(["a", "b", "never"])
    assert found == {
        "a": (b"A2", second),
        "b": await store.read("b"),  # deleted: no value, with its revision
        "never": (None, None),
    }
    assert found["b"][0] is None and found["b"][1] is not None
    assert await store.read_many([]) == {}
    with pytest.raises(ValueError):
        await store.read_many([f"k{i}" for i in range(MANY_LIMIT + 1)])


async def test_many_keys_written_at_once_are_all_stored_or_none(
    nc: Client, provisioned: Settings
) -> None:
    store = await bucket(nc, provisioned)
    revisions = await store.write_many([("a", b"A1", None), ("b", b"B1", None)])
    assert revisions is not None
    assert await store.read_many(["a", "b"]) == {
        "a": (b"A1", revisions[0]),
        "b": (b"B1", revisions[1]),
    }
    # Another writer updated "b": the batch on the old revision stores nothing.
    other = await store.write("b", b"B-other", revisions[1])
    assert await store.write_many([("a", b"A2", revisions[0]), ("b", b"B2", revisions[1])]) is None
    assert await store.read_many(["a", "b"]) == {
        "a": (b"A1", revisions[0]),
        "b": (b"B-other", other),
    }
    # A key that exists is not created again.
    assert await store.write_many([("a", b"A3", None)]) is None
    again = await store.write_many([("a", b"A2", revisions[0]), ("b", b"B2", other)])
    assert again is not None
    assert await store.read("a") == (b"A2", again[0])
    assert await store.read("b") == (b"B2", again[1])


async def test_one_write_alone_is_stored_on_its_revision_or_refused(
    nc: Client, provisioned: Settings
) -> None:
    # A single write goes as one plain publish with its expectation, not an atomic batch.
    store = await bucket(nc, provisioned)
    created = await store.write_many([("solo", b"S1", None)])
    assert created is not None and await store.read("solo") == (b"S1", created[0])
    updated = await store.write_many([("solo", b"S2", created[0])])
    assert updated is not None and updated[0] > created[0]
    assert await store.write_many([("solo", b"S3", created[0])]) is None  # stale revision
    assert await store.read("solo") == (b"S2", updated[0])
    message = await nc.jetstream().get_last_msg(f"KV_{provisioned.kv_bucket}", "$KV.*.solo")
    assert not any(name.startswith("Nats-Batch") for name in message.headers or {})
