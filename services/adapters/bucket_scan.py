"""Reading the whole projection bucket by its stream, with direct gets only (SPEC §10).

A key-value watch takes a consumer, which the auditor (`replay`) may not create: a user that
may create one may also make the server deliver to any subject it names. The bucket's stream
`KV_<bucket>` can be read like any other with batched direct gets, and with history 1
(`ensure_bucket`) it holds at any moment exactly one message per key, on `$KV.<bucket>.<key>`:
the key's latest value, or the marker of its delete or purge (a `KV-Operation` header). So a
scan in stream order meets every key once, except a key rewritten while the scan runs, whose
message moves forward in the stream:

- `iterate_bucket`: the raw scan, every message after a stream sequence, in order. The
  gateway's `sessions` listing pages through it; it misses no key (a rewritten one moves
  ahead of the scan and is met again, and the client drops the repeat).
- `bucket_values`: every key that holds a value, once, for a whole-bucket audit. It stops at
  the stream's last sequence when it began, so each key is met at most once with no memory of
  the keys already met, whatever the bucket's size; markers are skipped. A key rewritten
  during the scan is met where the scan found it, if the scan got there first, and else not
  at all: its value is then newer than the scan (past where it stops).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import cast

from nats.aio.client import Client

from services.adapters.session_read import RawStored, iterate_direct

#: Values asked of the server per direct-get batch of a whole-bucket scan, and the bytes at
#: most: a state can be far larger than an event, and a batch waits whole in the client's
#: subscription, whose pending bytes are bounded (past that it would drop messages).
SCAN_BATCH = 1024
SCAN_BATCH_BYTES = 8 * 1024 * 1024
#: The `KV-Operation` header values of a delete's and a purge's marker.
MARKERS = frozenset({"DEL", "PURGE"})


def bucket_stream(bucket: str) -> str:
    """The stream behind a bucket: `KV_<bucket>`."""
    return f"KV_{bucket}"


def key_prefix(bucket: str) -> str:
    """What precedes a key in its subject: `$KV.<bucket>.`."""
    return f"$KV.{bucket}."


def iterate_bucket(
    nc: Client,
    bucket: str,
    after_seq: int = 0,
    batch: int = SCAN_BATCH,
    max_bytes: int | None = None,
) -> AsyncGenerator[RawStored]:
    """Every message of the bucket's stream after `after_seq`, in stream order (values and
    markers alike), with batched direct gets (`iterate_direct`; a bucket's stream holds only
    its keys' subjects, so the batches are unfiltered)."""
    subject_filter = key_prefix(bucket) + ">"
    messages = iterate_direct(
        nc,
        bucket_stream(bucket),
        subject_filter,
        after_seq,
        batch,
        max_bytes=max_bytes,
        whole_stream=True,
    )
    return cast(AsyncGenerator[RawStored], messages)


@dataclass(frozen=True)
class BucketValue:
    """One key's value as the scan found it, at its stream sequence (the key's revision)."""

    key: str
    value: bytes
    revision: int


async def live_values(
    messages: AsyncGenerator[RawStored],
    bucket: str,
    through_seq: int,
    progress: Callable[[int], None] | None = None,
) -> AsyncIterator[BucketValue]:
    """The values among the bucket's `messages` (in stream order) up to `through_seq`: a
    delete's or purge's marker is skipped, and the scan ends at the first message past
    `through_seq`. `progress(scanned)` counts the messages read, markers included."""
    prefix = key_prefix(bucket)
    scanned = 0
    async with aclosing(messages) as stored:
        async for raw in stored:
            if raw.stream_seq > through_seq:
                return
            scanned += 1
            if progress is not None:
                progress(scanned)
            if raw.kv_operation in MARKERS or not raw.subject.startswith(prefix):
                continue
            yield BucketValue(raw.subject[len(prefix) :], raw.data, raw.stream_seq)


async def bucket_values(
    nc: Client, bucket: str, progress: Callable[[int, int], None] | None = None
) -> AsyncIterator[BucketValue]:
    """Every key of the bucket that holds a value, once, with the value the scan found (see
    the module docstring). `progress(scanned, total)` counts the bucket's messages."""
    state = (await nc.jetstream().stream_info(bucket_stream(bucket))).state
    total, last_seq = state.messages, state.last_seq
    counted = None if progress is None else lambda scanned: progress(scanned, total)
    if total == 0:
        return
    messages = iterate_bucket(nc, bucket, max_bytes=SCAN_BATCH_BYTES)
    async for value in live_values(messages, bucket, last_seq, counted):
        yield value
