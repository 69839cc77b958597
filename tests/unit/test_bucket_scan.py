"""The whole-bucket scan without a broker (services.adapters.bucket_scan): on a stream that
keeps one message per key (history 1), it yields every key holding a value exactly once with
its value, skips deleted and purged keys, and never yields a key twice, even when keys are
rewritten while it runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from hypothesis import given
from hypothesis import strategies as st

from services.adapters.bucket_scan import BucketValue, live_values
from services.adapters.session_read import RawStored

BUCKET = "REMINDER_SESSIONS"
KEYS = ("s1", "s2", "=ab12", "s4")

#: One write to the bucket: (key, value, marker); a value of None writes the marker (a delete
#: or a purge).
Write = tuple[str, bytes | None, str]
writes = st.tuples(
    st.sampled_from(KEYS),
    st.one_of(st.none(), st.binary(min_size=1, max_size=8)),
    st.sampled_from(["DEL", "PURGE"]),
)


class HistoryOneStream:
    """A bucket's stream as the server keeps it with history 1: each write replaces the
    key's previous message, at the next stream sequence."""

    def __init__(self) -> None:
        self.messages: dict[int, RawStored] = {}
        self.last_seq = 0

    def write(self, key: str, value: bytes | None, marker: str) -> None:
        subject = f"$KV.{BUCKET}.{key}"
        for seq in [s for s, m in self.messages.items() if m.subject == subject]:
            del self.messages[seq]
        self.last_seq += 1
        operation = None if value is not None else marker
        self.messages[self.last_seq] = RawStored(value or b"", self.last_seq, subject, 0, operation)

    def live(self) -> dict[str, bytes]:
        prefix = f"$KV.{BUCKET}."
        return {
            m.subject.removeprefix(prefix): m.data
            for m in self.messages.values()
            if m.kv_operation is None
        }

    async def scan(self, during: list[Write]) -> AsyncGenerator[RawStored]:
        """The messages in stream order as batched direct gets meet them: each read finds the
        first message after the last one read, and one write of `during` lands before it."""
        position = 0
        pending = list(during)
        while True:
            if pending:
                self.write(*pending.pop(0))
            after = [seq for seq in self.messages if seq > position]
            if not after:
                return
            position = min(after)
            yield self.messages[position]


def scanned(stream: HistoryOneStream, during: list[Write] | None = None) -> list[BucketValue]:
    async def collect() -> list[BucketValue]:
        messages = stream.scan(during or [])
        return [value async for value in live_values(messages, BUCKET, stream.last_seq)]

    return asyncio.run(collect())


@given(st.lists(writes, max_size=30))
def test_a_quiet_bucket_yields_each_key_with_a_value_once_with_its_latest_value(
    history: list[Write],
) -> None:
    stream = HistoryOneStream()
    for write in history:
        stream.write(*write)
    found = scanned(stream)
    assert {value.key: value.value for value in found} == stream.live()
    assert len(found) == len(stream.live())
    assert [value.revision for value in found] == sorted(value.revision for value in found)


@given(st.lists(writes, max_size=30), st.lists(writes, max_size=10))
def test_keys_rewritten_during_the_scan_are_never_yielded_twice(
    history: list[Write], during: list[Write]
) -> None:
    stream = HistoryOneStream()
    for write in history:
        stream.write(*write)
    before = stream.live()
    touched = {key for key, _, _ in during}
    found = scanned(stream, during)
    keys = [value.key for value in found]
    assert len(keys) == len(set(keys))
    # Every key the writes left alone is found, with the value it held all along.
    untouched = {key: value for key, value in before.items() if key not in touched}
    assert {v.key: v.value for v in found if v.key not in touched} == untouched


def test_markers_are_skipped_and_the_scan_ends_past_its_last_sequence() -> None:
    stream = HistoryOneStream()
    stream.write("s1", b"one", "DEL")
    stream.write("s2", b"two", "DEL")
    stream.write("s2", None, "PURGE")
    stream.write("s3", None, "DEL")
    last_seq = stream.last_seq
    stream.write("s4", b"after", "DEL")
    counts: list[int] = []

    async def collect() -> list[BucketValue]:
        values = live_values(stream.scan([]), BUCKET, last_seq, counts.append)
        return [value async for value in values]

    assert asyncio.run(collect()) == [BucketValue("s1", b"one", 1)]
    assert counts == [1, 2, 3]  # the value and both markers, not the message past the end
