"""`verify-projection` and `rebuild` read each session's value from the bucket by a direct
get (several sessions' with one multi-key get), which any replica may answer: a read that
times out (a replica that froze or went away) is asked for again, and one that keeps timing
out ends the command in one line."""

from __future__ import annotations

from typing import Any

import nats.js.errors
import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from replay.errors import ReplayError
from replay.rebuild import read_projection, read_projections
from replay.source import STALL_RETRIES
from services.adapters.records import KvSessionStore


class Entry:
    def __init__(self, value: bytes, revision: int) -> None:
        self.value = value
        self.revision = revision


class Bucket:
    """A bucket whose first `timeouts` gets time out."""

    def __init__(self, timeouts: int, value: bytes | None = b"{}") -> None:
        self.timeouts = timeouts
        self.value = value
        self.gets = 0

    async def get(self, key: str) -> Entry:
        self.gets += 1
        if self.gets <= self.timeouts:
            raise NatsTimeoutError
        if self.value is None:
            raise nats.js.errors.KeyNotFoundError
        return Entry(self.value, 7)


def store(bucket: Bucket) -> KvSessionStore:
    kv: Any = bucket
    return KvSessionStore(kv, kv, "B")  # one key at a time: no connection used


async def test_a_read_that_timed_out_is_asked_for_again() -> None:
    bucket = Bucket(timeouts=STALL_RETRIES)
    assert await read_projection(store(bucket), "s1") == (b"{}", 7)
    assert bucket.gets == STALL_RETRIES + 1


async def test_an_absent_key_is_an_answer_not_a_stall() -> None:
    bucket = Bucket(timeouts=1, value=None)
    assert await read_projection(store(bucket), "s1") == (None, None)
    assert bucket.gets == 2


async def test_a_read_that_keeps_timing_out_ends_in_one_line() -> None:
    bucket = Bucket(timeouts=STALL_RETRIES + 1)
    with pytest.raises(ReplayError, match="projection of session s1 was not read in time"):
        await read_projection(store(bucket), "s1")
    assert bucket.gets == STALL_RETRIES + 1


class ManyKeys:
    """A bucket read many keys at a time, whose first `timeouts` reads time out as asyncio's
    `wait_for` does."""

    def __init__(self, timeouts: int) -> None:
        self.timeouts = timeouts
        self.reads = 0

    async def read_many(self, tokens: list[str]) -> dict[str, tuple[bytes | None, int | None]]:
        self.reads += 1
        if self.reads <= self.timeouts:
            raise TimeoutError
        return {token: (b"{}", 7) for token in tokens}


async def test_a_read_of_many_keys_that_timed_out_is_asked_for_again() -> None:
    bucket: Any = ManyKeys(timeouts=STALL_RETRIES)
    assert await read_projections(bucket, ["s1", "s2"]) == {"s1": (b"{}", 7), "s2": (b"{}", 7)}
    assert bucket.reads == STALL_RETRIES + 1


async def test_a_read_of_many_keys_that_keeps_timing_out_ends_in_one_line() -> None:
    bucket: Any = ManyKeys(timeouts=STALL_RETRIES + 1)
    with pytest.raises(ReplayError, match="projections of 2 sessions were not read in time"):
        await read_projections(bucket, ["s1", "s2"])
    assert bucket.reads == STALL_RETRIES + 1
