"""What a session's delivered rows and id lists weigh in the state-size bound (§4.1.1).

`delivered` ends in a run of envelopes kept in full (the fold turns older ones into digests):
`kept_from` finds where it begins, `KeptRun` sums its texts and directive ids, and
`history_of` measures what only a long history grows, the digests before the run and the
seen, revoked, fired and acknowledged ids. The fold's scratch carries these sums from one
state to the next, so a command on a session that has lived does not measure them again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from contracts.state import DeliveredDigest, DeliveredEnvelope
from core.size import MeasuredOnce, digest_bytes, json_bytes, stored_bytes

#: Stored size of each delivered envelope's text, by row, held only while the row lives: a row
#: is measured as it joins the kept run and again as it leaves it (or as a run is summed
#: afresh), and a table keyed by the texts themselves would keep them alive after every state
#: let them go.
TEXT_BYTES: MeasuredOnce[DeliveredEnvelope] = MeasuredOnce(lambda row: stored_bytes(row.text))

#: A session's delivered rows, as the state and the fold's scratch hold them.
Rows = list[DeliveredEnvelope | DeliveredDigest]


def kept_from(rows: Rows) -> int:
    """Where the newest delivered rows kept in full begin: the run of envelopes at the end
    (the fold turns the oldest envelopes into digests, so every row before them is one)."""
    start = len(rows)
    while start and isinstance(rows[start - 1], DeliveredEnvelope):
        start -= 1
    return start


@dataclass(frozen=True)
class KeptRun:
    """The run of envelopes kept in full at the end of `delivered`, summed for the bound."""

    #: The index of its first row in `delivered` (`kept_from`).
    start: int
    #: The stored bytes of its texts.
    text_bytes: int
    #: How many directive ids its rows list, row by row.
    directive_ids: int

    @classmethod
    def of(cls, rows: Rows) -> KeptRun:
        """The run of `rows`, measured in full."""
        start = kept_from(rows)
        kept = cast(list[DeliveredEnvelope], rows[start:])
        ids = sum(len(row.directive_ids) for row in kept)
        return cls(start, sum(TEXT_BYTES.many(kept)), ids)

    def appended(self, row: DeliveredEnvelope) -> KeptRun:
        """The run after `row` joined its end."""
        return KeptRun(
            self.start,
            self.text_bytes + TEXT_BYTES(row),
            self.directive_ids + len(row.directive_ids),
        )

    def without_first(self, row: DeliveredEnvelope) -> KeptRun:
        """The run after its first row, `row`, became a digest."""
        return KeptRun(
            self.start + 1,
            self.text_bytes - TEXT_BYTES(row),
            self.directive_ids - len(row.directive_ids),
        )


class HistoryHolder(Protocol):
    """A state or a scratch: the lists a long history grows, read only."""

    @property
    def seen_ids(self) -> Sequence[str]:
        """Ids seen."""

    @property
    def revoked_ids(self) -> Sequence[str]:
        """Ids revoked."""

    @property
    def fired_ids(self) -> Sequence[str]:
        """Ids fired."""

    @property
    def acknowledged(self) -> Mapping[str, object]:
        """Acknowledged reminders by id."""

    @property
    def delivered(self) -> Rows:
        """Delivered rows, oldest first."""


def history_bytes(*lists: Sequence[str]) -> int:
    """Stored bytes of the ids in `lists`, each with its quotes and a comma."""
    return sum(stored_bytes(item) + 3 for ids in lists for item in ids)


def history_of(holder: HistoryHolder) -> int:
    """What only a long history grows, measured in full: the seen, revoked, fired and
    acknowledged ids, and the delivered rows before the newest full envelopes."""
    ids = history_bytes(holder.seen_ids, holder.revoked_ids, holder.fired_ids)
    ids += history_bytes(list(holder.acknowledged))
    older = holder.delivered[: kept_from(holder.delivered)]
    # An envelope among the older rows (a state the fold did not make) is counted whole.
    return ids + sum(
        digest_bytes(row)
        if isinstance(row, DeliveredDigest)
        else json_bytes(row.model_dump(mode="json")) + 1
        for row in older
    )
