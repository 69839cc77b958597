"""The projection bucket: compare-and-set writes on the revision, and reads of its values
(their bytes: `services.adapters.record_codec`).

The `Tombstone` model itself is a contract (`contracts.records`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import nats
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from services.adapters.ids import new_uuid7
from services.adapters.jetstream import (
    H_EXPECTED_SEQ,
    JetStreamApiError,
    publish_stored,
    send_atomic_batch,
)

#: How long one read of the bucket may take (nats-py's own default for a KV get).
READ_TIMEOUT_S = 5.0
#: Keys one `read_many` or `write_many` call may carry: the server answers a multi-key
#: direct get and accepts an atomic batch of at most 1000 (nats-server 2.15).
MANY_LIMIT = 1000
#: The server's err_code for a wrong expected last sequence (a stale revision).
ERR_WRONG_LAST_SEQUENCE = 10071


async def read_last_value(
    nc: Client, bucket: str, token: str, timeout_s: float = READ_TIMEOUT_S
) -> bytes | None:
    """A key's last value, read with one direct get of the bucket's stream
    (`$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>`: answered by the stream itself, not
    through the server's JetStream API queue; no watcher, no consumer, no model). None: the
    key never had a value; a deleted or purged key reads as empty bytes. Any other answer
    raises `JetStreamApiError`."""
    value, _ = await read_last_entry(nc, bucket, token, timeout_s)
    return value


async def read_last_entry(
    nc: Client, bucket: str, token: str, timeout_s: float = READ_TIMEOUT_S
) -> tuple[bytes | None, int]:
    """`read_last_value` and the bucket stream's sequence of that value (0 for none): a
    direct get may be answered by a replica still behind, which the sequence tells."""
    reply = await nc.request(
        f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.{token}", b"", timeout=timeout_s
    )
    headers = reply.headers or {}
    status = headers.get("Status")
    if status == "404":  # no value for the key
        return None, 0
    if status:
        raise JetStreamApiError(
            {"code": int(status), "description": headers.get("Description", "")}
        )
    seq = int(headers.get("Nats-Sequence", "0"))
    if headers.get("KV-Operation") in ("DEL", "PURGE"):
        return b"", seq
    return reply.data, seq


class StaleRevision(Exception):
    """Another writer changed the record since it was read."""


class KvSessionStore:
    """The projection bucket, with compare-and-set writes on the revision.

    One key at a time through nats-py's key-value API; many at once (`read_many`,
    `write_many`) with one multi-key direct get and one atomic batch of the bucket's
    stream, which cost the client a fraction of one request per key."""

    def __init__(self, kv: KeyValue, nc: Client, bucket: str) -> None:
        self._kv = kv
        self._nc = nc
        self._bucket = bucket

    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        """Value and revision; a deleted key reads as empty with its revision."""
        try:
            entry = await self._kv.get(token)
        except nats.js.errors.KeyNotFoundError as missing:
            # nats-py raises this for a deleted key too, with the delete marker's entry.
            marker = missing.entry
            return None, None if marker is None else marker.revision
        return entry.value, entry.revision

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        """Create when there was no revision, else update on exactly that revision."""
        try:
            if revision is None:
                return int(await self._kv.create(token, value))
            return int(await self._kv.update(token, value, last=revision))
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            raise StaleRevision(token) from exc

    async def read_many(
        self, tokens: Sequence[str], timeout_s: float = READ_TIMEOUT_S
    ) -> dict[str, tuple[bytes | None, int | None]]:
        """What `read` returns for each of `tokens` (at most `MANY_LIMIT`), read with one
        direct get of each key's last value (`multi_last`). A key never written is not
        answered: it reads as (None, None). Any error status raises `JetStreamApiError`; no
        answer within `timeout_s`, `TimeoutError`."""
        if len(tokens) > MANY_LIMIT:
            raise ValueError(f"at most {MANY_LIMIT} keys in one read")
        found: dict[str, tuple[bytes | None, int | None]] = dict.fromkeys(tokens, (None, None))
        if not tokens:
            return found
        prefix = f"$KV.{self._bucket}."
        ended: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()

        async def on_reply(message: Msg) -> None:
            headers = message.headers or {}
            if "Status" in headers:  # 204: the end of the answer; 404: no key had a value
                if not ended.done():
                    ended.set_result(headers)
                return
            token = headers["Nats-Subject"][len(prefix) :]
            revision = int(headers["Nats-Sequence"])
            deleted = headers.get("KV-Operation") in ("DEL", "PURGE")
            found[token] = (None if deleted else message.data, revision)

        inbox = self._nc.new_inbox()
        subscription = await self._nc.subscribe(inbox, cb=on_reply)
        try:
            request = {"multi_last": [prefix + token for token in tokens], "batch": len(tokens)}
            await self._nc.publish(
                f"$JS.API.DIRECT.GET.KV_{self._bucket}", orjson.dumps(request), reply=inbox
            )
            end = await asyncio.wait_for(ended, timeout_s)
        finally:
            await subscription.unsubscribe()
        if end["Status"] not in ("204", "404"):
            raise JetStreamApiError(
                {"code": int(end["Status"]), "description": end.get("Description", "")}
            )
        return found

    async def write_many(
        self, writes: Sequence[tuple[str, bytes, int | None]], timeout_s: float = READ_TIMEOUT_S
    ) -> list[int] | None:
        """Several `write`s (token, value, revision; at most `MANY_LIMIT`, one per token) as
        one atomic batch, each on its own expected revision: all are stored or none.
        Returns each new revision in order, or None when a revision was stale (nothing was
        stored: the caller tells which by writing them one by one). Any other refusal
        raises `JetStreamApiError`; a lost answer, nats-py's error (which leaves it unknown
        whether the batch was stored, as for a single write)."""
        if not writes or len(writes) > MANY_LIMIT:
            raise ValueError(f"an atomic batch holds 1 to {MANY_LIMIT} writes")
        messages = [
            (f"$KV.{self._bucket}.{token}", value, {H_EXPECTED_SEQ: str(revision or 0)})
            for token, value, revision in writes
        ]
        try:
            if len(messages) == 1:
                # One write is all or nothing by itself. As a plain publish it is acked as
                # every other write to the bucket is (synced only under sync_interval:
                # always), where nats-server syncs every atomic commit to disk before its
                # PubAck on R1: a projector at light load, whose round holds one session,
                # paid that sync per event.
                last_seq = await publish_stored(self._nc, *messages[0], timeout_s)
            else:
                last_seq = await send_atomic_batch(self._nc, messages, new_uuid7(), timeout_s)
        except JetStreamApiError as error:
            if error.err_code == ERR_WRONG_LAST_SEQUENCE:
                return None
            raise
        first = last_seq - len(writes) + 1
        return list(range(first, last_seq + 1))
