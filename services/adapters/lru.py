"""A least-recently-used cache bounded in bytes (and, optionally, in entries): what the
gateway's sessions and the projector's records are both kept in. Each entry carries the size
it counts against the byte bound, given by the caller, who knows what is cheap to measure."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    """An entry that says what it counts against the byte bound."""

    @property
    def size(self) -> int:
        """Bytes."""
        ...


V = TypeVar("V", bound=Sized)


class SizedLru(Generic[V]):
    """Entries by key, the least recently put or got evicted first beyond either bound."""

    def __init__(self, max_bytes: int, max_entries: int | None = None) -> None:
        self._max_bytes = max_bytes
        self._max_entries = max_entries
        self._entries: OrderedDict[str, V] = OrderedDict()
        self._bytes = 0
        self._evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """What the entries count against the byte bound."""
        return self._bytes

    @property
    def evictions(self) -> int:
        """Entries evicted beyond a bound so far: once there are any, the cache is full."""
        return self._evictions

    def get(self, key: str) -> V | None:
        """The entry, freshened in LRU order."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def pop(self, key: str) -> V | None:
        """Remove and return the entry."""
        value = self._entries.pop(key, None)
        if value is not None:
            self._bytes -= value.size
        return value

    def put(self, key: str, value: V) -> None:
        """Keep `value` as the newest, then evict the oldest while over a bound."""
        self.pop(key)
        self._entries[key] = value
        self._bytes += value.size
        while self._entries and (
            self._bytes > self._max_bytes
            or (self._max_entries is not None and len(self._entries) > self._max_entries)
        ):
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size
            self._evictions += 1
