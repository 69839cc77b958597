"""Reading the projection bucket, and waiting for it: one watch per process, shared by
every reader that waits.

A KV watcher is a JetStream consumer: one per waiting read would exhaust the server's
consumers under a flood of long waits and break every session's queries (SPEC §4.10). So a
process (a gateway replica answering queries, a providers replica waiting for `min_seq`)
keeps a single ordered consumer on `$KV.<bucket>.>` that delivers new values only, started on
the first wait, and hands each update to the reads waiting on that key. Waits are bounded per
process and per session, so one session's flood cannot take every place: past either bound
the caller is told at once (`TooManyWaiting`).

The watch carries headers only: it would otherwise bring every value the projector writes
into every gateway replica — each write of a long session's state, hundreds of kilobytes,
many times a second, whether or not anyone waits on that key (measured in
`docs/reliability.md`: it was most of the bytes a gateway received, and the bursts of its
memory). An update of a key someone waits on is followed by one direct get of that key's
last value (one at a time per key, again while newer updates arrived), read as a `Projected`
(its bytes and sequences, from one `orjson` parse), never as the full model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.errors import NotJSMessageError
from nats.js.api import DeliverPolicy

from contracts.state import SessionState
from services.adapters.jetstream import JetStreamApiError
from services.adapters.records import READ_TIMEOUT_S, read_last_entry, read_last_value

log = logging.getLogger("reminders.projection")

#: How a waited key's value is read after an update: attempts while the direct get answers
#: with a value older than the update (a replica behind), and the unit of the pause before
#: each new attempt (twice this before the first, doubling after).
FETCH_ATTEMPTS = 5
FETCH_RETRY_S = 0.02

#: Top-level keys of a state the current `encode_state` writes; those left out while empty
#: (`providers`, `mutes`) may be missing.
_STATE_KEYS = frozenset(SessionState.model_fields)
_REQUIRED_STATE_KEYS = _STATE_KEYS - {
    name for name, info in SessionState.model_fields.items() if info.exclude_if is not None
}


@dataclass(frozen=True)
class Projected:
    """One value of the projection bucket, read only as far as a query needs: its bytes,
    the sequences a wait compares, and whether it is a tombstone."""

    value: bytes = b""
    session_seq: int = 0
    stream_seq: int = 0
    #: Set for a tombstone (SPEC §4.11): the stream sequence its purge went up to.
    purged_through: int | None = None
    #: Whether the value has exactly the top-level fields of the current `SessionState`, so
    #: it can be passed on as the reply's state as stored (`encode_state` wrote it).
    current: bool = False
    #: The value as parsed, when its reader keeps it (`BucketReader(keep_parsed=True)`), so
    #: the model is built without parsing the bytes a second time.
    parsed: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def is_state(self) -> bool:
        """A session state (not an empty key, not a tombstone)."""
        return bool(self.value) and self.purged_through is None

    def session_state(self, leave_out: Collection[str] = ()) -> SessionState | None:
        """The model (None for an empty key or a tombstone). The top-level fields named in
        `leave_out` are neither validated nor kept: the model has their defaults."""
        if not self.is_state:
            return None
        if not leave_out and self.parsed is None:
            return SessionState.model_validate_json(self.value)
        raw = self.parsed if self.parsed is not None else orjson.loads(self.value)
        if leave_out:
            raw = {key: value for key, value in raw.items() if key not in leave_out}
        return SessionState.model_validate(raw)


def read_projected(value: bytes | None, keep_parsed: bool = False) -> Projected:
    """A bucket value as a `Projected` (an empty or deleted one: an empty record), holding
    the parsed value too if `keep_parsed`; `ValueError` for what the projector would not
    write."""
    if not value:
        return Projected()
    raw: Any = orjson.loads(value)
    if not isinstance(raw, dict):
        raise ValueError("a bucket value is not a JSON object")
    if raw.get("tombstone") is True:
        return Projected(value, purged_through=_int(raw, "purged_through"))
    keys = raw.keys()
    return Projected(
        value,
        session_seq=_int(raw, "session_seq"),
        stream_seq=_int(raw, "stream_seq"),
        current=_REQUIRED_STATE_KEYS <= keys <= _STATE_KEYS,
        parsed=raw if keep_parsed else None,
    )


def _int(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key, 0)
    if type(value) is not int:
        raise ValueError(f"{key} is not an integer")
    return value


class TooManyWaiting(Exception):
    """Every place for a waiting query is taken (on this replica, or for this session)."""


@dataclass(eq=False)
class Waiter:
    """One query waiting until a record of its key satisfies `ready`."""

    token: str
    ready: Callable[[Projected], bool]
    done: asyncio.Future[Projected] = field(default_factory=asyncio.Future)


class ProjectionWatch:
    """Dispatches the bucket's updates to the queries waiting on each key."""

    def __init__(
        self, nc: Client, bucket: str, max_waiting: int, max_waiting_per_session: int
    ) -> None:
        self._nc = nc
        self._bucket = bucket
        self._prefix = f"$KV.{bucket}."
        self._max_waiting = max_waiting
        self._per_session = max_waiting_per_session
        self._waiters: dict[str, set[Waiter]] = {}
        self._count = 0
        self._subscription: Subscription | None = None
        self._starting = asyncio.Lock()
        #: Per waited key with a read in progress: the newest update's stream sequence.
        self._latest: dict[str, int] = {}
        self._fetches: set[asyncio.Task[None]] = set()

    @property
    def waiting(self) -> int:
        """Queries waiting now."""
        return self._count

    async def ensure_started(self) -> None:
        """Start the one watch on first use (an ordered consumer of new values only)."""
        async with self._starting:
            if self._subscription is not None:
                return
            self._subscription = await self._nc.jetstream().subscribe(
                f"{self._prefix}>",
                stream=f"KV_{self._bucket}",
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
                headers_only=True,
                cb=self._on_update,
            )

    async def stop(self) -> None:
        """Stop the watch; waiting queries run into their deadlines."""
        if self._subscription is not None:
            await self._subscription.unsubscribe()
            self._subscription = None
        for fetch in list(self._fetches):
            fetch.cancel()

    def register(self, token: str, ready: Callable[[Projected], bool]) -> Waiter:
        """A place for one waiting query, or `TooManyWaiting`."""
        waiting_here = self._waiters.setdefault(token, set())
        if self._count >= self._max_waiting or len(waiting_here) >= self._per_session:
            if not waiting_here:
                del self._waiters[token]
            raise TooManyWaiting(token)
        waiter = Waiter(token, ready)
        waiting_here.add(waiter)
        self._count += 1
        return waiter

    def release(self, waiter: Waiter) -> None:
        """Give the place back (idempotent)."""
        waiting_here = self._waiters.get(waiter.token)
        if waiting_here is None or waiter not in waiting_here:
            return
        waiting_here.discard(waiter)
        self._count -= 1
        if not waiting_here:
            del self._waiters[waiter.token]
        if not waiter.done.done():
            waiter.done.cancel()

    async def _on_update(self, message: Msg) -> None:
        token = message.subject[len(self._prefix) :]
        if not self._waiters.get(token):
            return  # nobody waits on this key: nothing read
        try:
            seq = message.metadata.sequence.stream
        except NotJSMessageError:
            seq = 0  # no sequence to compare: the value read is taken as the newest
        if token in self._latest:  # a read is in progress: it reads again for this one
            self._latest[token] = max(self._latest[token], seq)
            return
        self._latest[token] = seq
        fetch = asyncio.create_task(self._fetch(token))
        self._fetches.add(fetch)
        fetch.add_done_callback(self._fetches.discard)

    async def _fetch(self, token: str) -> None:
        """Read the key's last value and hand it to its waiters, again while newer updates
        arrive; a value older than the update asked for (a replica behind) is read again
        after a pause, a few times (then the waiters read it themselves at their deadline)."""
        behind = 0
        try:
            while behind < FETCH_ATTEMPTS and self._waiters.get(token):
                asked = self._latest[token]
                try:
                    value, seq = await read_last_entry(self._nc, self._bucket, token)
                    record = read_projected(value)
                except (TimeoutError, NatsError, JetStreamApiError, ValueError) as exc:
                    log.warning("waited value unread", extra={"error": type(exc).__name__})
                    return
                for waiter in list(self._waiters.get(token, ())):
                    if not waiter.done.done() and waiter.ready(record):
                        waiter.done.set_result(record)
                if seq >= self._latest[token]:
                    return
                if seq < asked:
                    behind += 1
                    await asyncio.sleep(FETCH_RETRY_S * 2**behind)
        finally:
            self._latest.pop(token, None)


class BucketReader:
    """Reads a bucket's values as `Projected`, and waits on the process's one shared watch
    until a value is ready. With `keep_parsed`, a value it reads holds its parse (`Projected.
    parsed`) for a caller that builds the model from each (the providers); a gateway passes
    the bytes on and keeps none."""

    def __init__(
        self,
        nc: Client,
        bucket: str,
        max_waiting: int,
        max_waiting_per_session: int,
        keep_parsed: bool = False,
    ) -> None:
        self._nc = nc
        self._bucket = bucket
        self._keep_parsed = keep_parsed
        self.watch = ProjectionWatch(nc, bucket, max_waiting, max_waiting_per_session)

    async def get(self, token: str, timeout_s: float = READ_TIMEOUT_S) -> Projected:
        """The key's last value (`read_last_value`: one direct get, parsed with `orjson`);
        a missing, deleted or purged key is an empty record."""
        value = await read_last_value(self._nc, self._bucket, token, timeout_s)
        return read_projected(value, self._keep_parsed)

    async def until(
        self, token: str, ready: Callable[[Projected], bool], timeout_s: float
    ) -> tuple[Projected, bool]:
        """The key's value once `ready` holds (read, then waited for up to `timeout_s`); and
        whether it still does not (stale). `TooManyWaiting` when it would have to wait and
        every place is taken."""
        record = await self.get(token)
        if not ready(record) and timeout_s > 0:
            del record  # not held while waiting (`wait`)
            record = await self.wait(token, ready, timeout_s)
        return record, not ready(record)

    async def wait(
        self, token: str, ready: Callable[[Projected], bool], timeout_s: float
    ) -> Projected:
        """Wait on the shared watch until a value of the key is `ready`, up to `timeout_s`;
        then the last value, ready or not. `TooManyWaiting` when every place is taken."""
        await self.watch.ensure_started()
        waiter = self.watch.register(token, ready)
        try:
            # Read again once registered, so an update between the two reads is not missed.
            record = await self.get(token)
            if ready(record):
                return record
            # A waiting query holds no value (a hot session's is large, and a fault makes
            # hundreds wait at once): its answer is read when the wait ends.
            del record
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(asyncio.shield(waiter.done), timeout_s)
            return await self.get(token)
        finally:
            self.watch.release(waiter)
