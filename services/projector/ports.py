"""What the projector's batch logic (`apply`) needs from the world: the deliveries of one
fetched batch, the projection bucket, the event stream's leader and the DLQ — protocols, so
the rules run and are tested without a broker (`adapters` has the NATS ones)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Delivery(Protocol):
    """One message as the projector sees it, whatever the client library."""

    subject: str
    data: bytes
    stream_seq: int
    num_delivered: int

    async def ack(self) -> None:
        """Acknowledge."""

    async def nak(self, delay_s: float) -> None:
        """Ask for redelivery after a delay."""


class SessionStore(Protocol):
    """The projection bucket."""

    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        """The value and its revision (None, None when absent)."""

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        """Compare-and-set; raises `StaleRevision`. Returns the new revision."""

    async def read_many(self, tokens: Sequence[str]) -> dict[str, tuple[bytes | None, int | None]]:
        """`read` of each token (at most `MANY_LIMIT`), at once."""

    async def write_many(self, writes: Sequence[tuple[str, bytes, int | None]]) -> list[int] | None:
        """`write` of each (token, value, revision), all or none: the new revisions, or None
        when one was stale. Other failures raise; whether anything was stored is then unknown."""


class SessionLog(Protocol):
    """The event stream, as its leader has it."""

    async def first_after(self, token: str, after_seq: int) -> int | None:
        """The stream seq of the session's first event after `after_seq` (None: none)."""

    async def events_between(
        self, token: str, after_seq: int, before_seq: int, limit: int
    ) -> list[LoggedEvent]:
        """The session's stored events after `after_seq` and before `before_seq`, in order,
        at most `limit`."""


@dataclass
class LoggedEvent:
    """An event read from the log to fill a gap, judged beside the batch's deliveries. It
    was not delivered here: nothing to ack or nak (its own delivery, when it comes, is a
    duplicate and is acked then)."""

    subject: str
    data: bytes
    stream_seq: int
    num_delivered: int = 1

    async def ack(self) -> None:
        """Nothing delivered, nothing to acknowledge."""

    async def nak(self, delay_s: float) -> None:
        """Nothing delivered, nothing to redeliver."""


class DeadLetters(Protocol):
    """Where poison messages go."""

    async def send(self, delivery: Delivery, token: str, code: str, reason: str) -> None:
        """Copy the message with its error to the DLQ stream."""
