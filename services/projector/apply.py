"""The projector's rules for one fetched batch, apart from how messages and KV are reached.

For each session token touched by the batch: load its record once, apply every message in
order — only the next `session_seq` whose `chain` follows `chain_head` — write the record
once with compare-and-set on the KV revision, then ack. A duplicate is acked and skipped; a
gap is nak'ed with a delay; a poison message goes to the DLQ with its error, is acked, and
marks the session degraded (§6.4). A session that is degraded or tombstoned never blocks
the consumer: its later events are acked and skipped, and `reminders rebuild` repairs it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import orjson
from pydantic import ValidationError

from contracts.events import SCHEMA_V1, Event
from contracts.state import DegradedMark, SessionState
from core import fold
from core.canonical import links
from services.adapters.records import Tombstone, decode_record, encode_state

log = logging.getLogger("reminders.projector")


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


class StaleRevision(Exception):
    """Another writer changed the record since it was read."""


class SessionStore(Protocol):
    """The projection bucket."""

    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        """The value and its revision (None, None when absent)."""

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        """Compare-and-set; raises `StaleRevision`. Returns the new revision."""


class DeadLetters(Protocol):
    """Where poison messages go."""

    async def send(self, delivery: Delivery, token: str, code: str, reason: str) -> None:
        """Copy the message with its error to the DLQ stream."""


class Verdict(Enum):
    """What happens to one delivery."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"
    GAP = "gap"
    POISON = "poison"
    SKIPPED = "skipped"


@dataclass
class Slot:
    """One session's record as last read or written."""

    record: SessionState | Tombstone | None
    revision: int | None


@dataclass
class BatchReport:
    """Counts of one batch, for metrics and tests."""

    verdicts: dict[Verdict, int] = field(default_factory=lambda: {v: 0 for v in Verdict})
    sessions_written: int = 0
    cas_retries: int = 0


def token_of(subject: str) -> str:
    """The session token is the subject's last token."""
    return subject.rsplit(".", 1)[-1]


def _poison_reason(exc: Exception) -> tuple[str, str]:
    """A code and a reason that never quote the message (it may hold a body)."""
    if isinstance(exc, orjson.JSONDecodeError):
        return "undecodable", "not a JSON object"
    if isinstance(exc, ValidationError):
        places = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
        return "invalid_event", f"failed validation at: {', '.join(places)[:500]}"
    return "invalid_event", type(exc).__name__


def decode(data: bytes) -> dict[str, Any]:
    """Parse an event envelope or raise; unknown schema versions and kinds are errors."""
    raw = orjson.loads(data)
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if raw.get("schema") != SCHEMA_V1:
        raise UnknownSchema(str(raw.get("schema"))[:80])
    return raw


class UnknownSchema(Exception):
    """An envelope version this build does not read (§3.7)."""


class Projector:
    """Folds fetched batches into the projection bucket."""

    def __init__(
        self,
        store: SessionStore,
        dead_letters: DeadLetters,
        *,
        gap_delay_s: float = 0.5,
        max_gap_redeliveries: int = 20,
        cache_sessions: int = 50_000,
        cas_retries: int = 5,
    ) -> None:
        self._store = store
        self._dead_letters = dead_letters
        self._gap_delay_s = gap_delay_s
        self._max_gap_redeliveries = max_gap_redeliveries
        self._cache: OrderedDict[str, Slot] = OrderedDict()
        self._cache_sessions = cache_sessions
        self._cas_retries = cas_retries
        self.last_apply_latency_s = 0.0

    async def process(self, batch: list[Delivery]) -> BatchReport:
        """Apply one fetched batch: one KV write per touched session, then acks."""
        report = BatchReport()
        by_token: OrderedDict[str, list[Delivery]] = OrderedDict()
        for delivery in batch:
            by_token.setdefault(token_of(delivery.subject), []).append(delivery)
        for token, deliveries in by_token.items():
            await self._process_session(token, deliveries, report)
        return report

    async def _slot(self, token: str, fresh: bool = False) -> Slot:
        slot = None if fresh else self._cache.get(token)
        if slot is None:
            value, revision = await self._store.read(token)
            slot = Slot(decode_record(value), revision)
        self._cache[token] = slot
        self._cache.move_to_end(token)
        while len(self._cache) > self._cache_sessions:
            self._cache.popitem(last=False)
        return slot

    async def _process_session(
        self, token: str, deliveries: list[Delivery], report: BatchReport
    ) -> None:
        started = time.perf_counter()
        slot = await self._slot(token)
        record, verdicts, poison = self._decide(slot.record, deliveries)
        if self._cache_looks_stale(slot, deliveries, verdicts):
            # Someone else wrote the bucket (a forget's tombstone, another replica): re-read.
            slot = await self._slot(token, fresh=True)
            record, verdicts, poison = self._decide(slot.record, deliveries)
        dead_lettered: set[int] = set()
        for attempt in range(self._cas_retries + 1):
            if attempt:
                record, verdicts, poison = self._decide(slot.record, deliveries)
            # Copy poison to the DLQ before the degraded mark is written: if the copy fails,
            # nothing is written or acked and the redelivery tries again.
            for delivery, verdict in zip(deliveries, verdicts, strict=True):
                if verdict is Verdict.POISON and delivery.stream_seq not in dead_lettered:
                    code, reason = poison[delivery.stream_seq]
                    await self._dead_letters.send(delivery, token, code, reason)
                    dead_lettered.add(delivery.stream_seq)
                    log.warning(
                        "poison message", extra={"stream_seq": delivery.stream_seq, "code": code}
                    )
            changed = record is not slot.record
            if not changed:
                break
            try:
                assert record is not None
                value = encode_state(record) if isinstance(record, SessionState) else b""
                revision = await self._store.write(token, value, slot.revision)
            except StaleRevision:
                report.cas_retries += 1
                slot = await self._slot(token, fresh=True)
                if attempt == self._cas_retries:
                    raise
                continue
            slot = Slot(record, revision)
            self._cache[token] = slot
            report.sessions_written += 1
            break
        for delivery, verdict in zip(deliveries, verdicts, strict=True):
            report.verdicts[verdict] += 1
            if verdict is Verdict.GAP:
                await delivery.nak(self._gap_delay_s)
            else:
                await delivery.ack()
        self.last_apply_latency_s = time.perf_counter() - started

    @staticmethod
    def _cache_looks_stale(slot: Slot, deliveries: list[Delivery], verdicts: list[Verdict]) -> bool:
        """A "duplicate" stored after what we applied means our copy is not the bucket's."""
        if not isinstance(slot.record, SessionState):
            return False
        applied_through = slot.record.stream_seq
        return any(
            verdict is Verdict.DUPLICATE and delivery.stream_seq > applied_through
            for delivery, verdict in zip(deliveries, verdicts, strict=True)
        )

    def _decide(
        self, record: SessionState | Tombstone | None, deliveries: list[Delivery]
    ) -> tuple[SessionState | Tombstone | None, list[Verdict], dict[int, tuple[str, str]]]:
        """Pure: the record after these deliveries, and a verdict for each."""
        verdicts: list[Verdict] = []
        poison: dict[int, tuple[str, str]] = {}
        blocked = False  # after a gap, later events of the session wait too
        for delivery in deliveries:
            try:
                raw = decode(delivery.data)
                event = Event.model_validate(raw)
            except UnknownSchema as exc:
                poison[delivery.stream_seq] = ("unknown_schema", f"schema {exc}")
                record = _degrade(record, delivery, "unknown_schema")
                verdicts.append(Verdict.POISON)
                continue
            except (ValueError, orjson.JSONDecodeError) as exc:
                poison[delivery.stream_seq] = _poison_reason(exc)
                record = _degrade(record, delivery, poison[delivery.stream_seq][0])
                verdicts.append(Verdict.POISON)
                continue
            if isinstance(record, Tombstone):
                if delivery.stream_seq <= record.purged_through or event.session_seq != 1:
                    verdicts.append(Verdict.SKIPPED)
                    continue
                record = None  # a new life of a forgotten session id
            state = record if isinstance(record, SessionState) else SessionState()
            if state.degraded is not None:
                verdicts.append(Verdict.SKIPPED)
                continue
            if event.session_seq <= state.session_seq:
                verdicts.append(Verdict.DUPLICATE)
                continue
            if blocked or event.session_seq > state.session_seq + 1:
                blocked = True
                if delivery.num_delivered >= self._max_gap_redeliveries:
                    poison[delivery.stream_seq] = ("gap", "the previous event never arrived")
                    record = _degrade(record, delivery, "gap")
                    verdicts.append(Verdict.POISON)
                else:
                    verdicts.append(Verdict.GAP)
                continue
            if not links(state.chain_head, raw):
                poison[delivery.stream_seq] = ("broken_chain", "chain does not follow chain_head")
                record = _degrade(record, delivery, "broken_chain")
                verdicts.append(Verdict.POISON)
                continue
            record = fold(state, event, delivery.stream_seq)
            verdicts.append(Verdict.APPLIED)
        return record, verdicts, poison


def _degrade(
    record: SessionState | Tombstone | None, delivery: Delivery, code: str
) -> SessionState | Tombstone | None:
    """Mark the session degraded at the first poison message (tombstones stay)."""
    if isinstance(record, Tombstone):
        return record
    state = record or SessionState()
    if state.degraded is not None:
        return state
    return state.model_copy(
        update={"degraded": DegradedMark(stream_seq=delivery.stream_seq, code=code)}
    )


@dataclass
class RowDelivery:
    """A stored event replayed through the projector's rules (rebuild, verification)."""

    subject: str
    data: bytes
    stream_seq: int
    num_delivered: int = 1

    async def ack(self) -> None:
        """Nothing to acknowledge: the row was read, not delivered."""

    async def nak(self, delay_s: float) -> None:
        """Nothing to redeliver."""


def project(
    start: SessionState | Tombstone | None, deliveries: list[Delivery]
) -> SessionState | Tombstone | None:
    """What the projector's rules make of these stored events, from `start`."""
    projector = Projector(_NoStore(), _NoDeadLetters(), max_gap_redeliveries=1)
    record, _, _ = projector._decide(start, deliveries)
    return record


class _NoStore:
    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        return None, None

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        raise NotImplementedError


class _NoDeadLetters:
    async def send(self, delivery: Delivery, token: str, code: str, reason: str) -> None:
        raise NotImplementedError
