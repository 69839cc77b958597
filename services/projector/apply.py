"""The projector's IO around one fetched batch; the rules are `core.projection.project`.

For each session token touched by the batch: load its record once, apply every message in
order — only the next `session_seq` whose `chain` follows `chain_head` — write the record
once with compare-and-set on the KV revision, then ack. A duplicate is acked and skipped; a
gap is nak'ed with a delay; a poison message goes to the DLQ with its error, is acked, and
marks the session degraded (§6.4). A session that is degraded or tombstoned never blocks
the consumer: its later events are acked and skipped, and `reminders rebuild` repairs it.

A gap is final — the event degrades its session — only when the log shows the missing
events are not there: once a gapped event came back `max_gap_redeliveries` times, the
stream's leader is asked for the session's first event after the record; only when that is
the gapped event itself are the missing ones absent. While it is earlier, they exist and
will be redelivered (a crashed replica's batch waits out its ack wait, a consumer's leader
election, a partition); while it is none or later, the answer came from a leader behind the
gapped event (one cut off from its cluster answers until it steps down: the long fault run
found three sessions degraded so). Either way the event is nak'ed again, however long that
takes. Counting redeliveries alone once degraded
sessions whose missing events came back after a partition (found by the fault suite's long
form: three sessions' projections never caught up).

Sessions are independent (one key each, their own `session_seq` and chain), so a batch's
touched sessions are taken in rounds (up to `round_sessions`, their cached records within
`bytes_in_flight`): the records not cached are read with one multi-key direct get, each
session is judged (concurrently, up to `concurrency` at once, for the few that wait on the
log or the DLQ), and the changed records are written as one atomic batch of the bucket's
stream, each message on its own expected revision (compare-and-set, all or none). That
costs the client a fraction of one request per session. When the batch is refused (a
revision was stale: another writer got there first) or fails, the round's records are
written one by one, each judged again on a stale revision. Within a session the order stays
the stream's: its deliveries are folded in order, written once, then acked; and the next
batch is only fetched once every session of this one is done.

The cache holds each session's bucket value as bytes, not the decoded record: a state held
as Python objects takes several times its encoded size, so the same memory keeps several
times as many sessions, and a touch of a cached one costs a decode instead of a bucket read.
It is bounded by the sum of those values' sizes (a measure that grows with what the states
hold rather than with how many sessions there are) and evicts the least recently used; an
evicted session is read back from the bucket.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from nats.errors import Error as NatsError

from contracts.state import SessionState
from contracts.stored import StoredEvent, Unreadable, read_stored
from contracts.subjects import last_token
from core.projection import Record, Verdict, project_all
from services.adapters import stages
from services.adapters.jetstream import JetStreamApiError
from services.adapters.lru import SizedLru
from services.adapters.record_codec import decode_record, encode_state
from services.adapters.records import MANY_LIMIT, StaleRevision
from services.projector.ports import DeadLetters, Delivery, LoggedEvent, SessionLog, SessionStore

__all__ = ["Delivery", "LoggedEvent", "Projector", "StaleRevision", "Verdict", "token_of"]

log = logging.getLogger("reminders.projector")


@dataclass
class Slot:
    """One session's record as last read or written, decoded for the round that judges it."""

    record: Record
    revision: int | None


@dataclass(frozen=True, slots=True)
class Kept:
    """What the cache holds of a session: its bucket value as last read or written, and its
    revision. The record is decoded again on its next touch: held as Python objects, a state
    takes several times its encoded bytes, so the same memory keeps several times as many
    sessions as bytes, and a touch of one of them costs a decode instead of a bucket read."""

    value: bytes | None
    revision: int | None

    @property
    def size(self) -> int:
        """Bytes of the value: what it counts against the cache budget."""
        return len(self.value or b"")


@dataclass
class _Judged:
    """One session of a round: its deliveries, the record they made, their verdicts."""

    token: str
    deliveries: list[Delivery]
    stored: list[StoredEvent | Unreadable]
    slot: Slot
    record: Record
    verdicts: list[Verdict]
    poison: dict[int, tuple[str, str]]
    started: float
    #: The stream seqs of the poison already copied to the DLQ.
    dead_lettered: set[int] = field(default_factory=set)


def _encoded(record: Record) -> bytes:
    """A record's bucket value: a state's canonical bytes; empty for anything else (a
    tombstone is written by `forget`, never by the projector)."""
    return encode_state(record) if isinstance(record, SessionState) else b""


@dataclass
class BatchReport:
    """Counts of one batch, for metrics and tests."""

    verdicts: dict[Verdict, int] = field(default_factory=lambda: {v: 0 for v in Verdict})
    sessions_written: int = 0
    cas_retries: int = 0
    #: Events read from the log to fill a gap (`Projector.GAP_FILL_LIMIT`), not delivered.
    filled: int = 0


def token_of(subject: str) -> str:
    """The session token is the subject's last token."""
    return last_token(subject)


class Projector:
    """Folds fetched batches into the projection bucket."""

    #: Events read from the log at most, per session and batch, to fill a gap.
    GAP_FILL_LIMIT = 64

    def __init__(
        self,
        store: SessionStore,
        dead_letters: DeadLetters,
        *,
        gap_delay_s: float = 0.5,
        max_gap_redeliveries: int = 20,
        cache_bytes: int = 64 * 1024 * 1024,
        cas_retries: int = 5,
        concurrency: int = 64,
        round_sessions: int = 256,
        bytes_in_flight: int = 1024 * 1024,
        log: SessionLog | None = None,
    ) -> None:
        self._store = store
        self._log = log
        self._dead_letters = dead_letters
        self._gap_delay_s = gap_delay_s
        self._max_gap_redeliveries = max_gap_redeliveries
        self._cache: SizedLru[Kept] = SizedLru(cache_bytes)
        self._cas_retries = cas_retries
        self._concurrency = max(1, concurrency)
        self._round_sessions = max(1, min(round_sessions, MANY_LIMIT))
        self._bytes_in_flight = bytes_in_flight
        self.last_apply_latency_s = 0.0

    async def process(
        self, batch: list[Delivery], report: BatchReport | None = None
    ) -> BatchReport:
        """Apply one fetched batch: one KV write per touched session, then its acks. Counts
        go into `report` (a new one by default) as sessions are settled, so a caller that
        passed one still has the counts of what was acked when this raises."""
        report = BatchReport() if report is None else report
        by_token: OrderedDict[str, list[Delivery]] = OrderedDict()
        for delivery in batch:
            by_token.setdefault(token_of(delivery.subject), []).append(delivery)
        for deliveries in by_token.values():
            # A session's events are judged in stream order (`project_all`: after a gap,
            # later ones wait), but a fetch returns redeliveries among new ones: a later
            # event nak'ed many times came back ahead of the earlier one it waited for,
            # which then waited behind it too, both were judged gaps, and the earlier one,
            # the leader's first after the record, made the gap look final.
            deliveries.sort(key=lambda delivery: delivery.stream_seq)
        # Every round runs to its end (a session that failed leaves the others written and
        # acked); then the first failure, if any, is raised and what was not acked is
        # redelivered.
        first: BaseException | None = None
        for sessions in self._rounds(by_token):
            failure = await self._process_round(sessions, report)
            first = first or failure
            del failure
        if first is not None:
            try:
                raise first
            finally:
                del first  # this frame is in its traceback now: no cycle through it
        return report

    def _rounds(
        self, by_token: OrderedDict[str, list[Delivery]]
    ) -> Iterator[list[tuple[str, list[Delivery]]]]:
        """The batch's sessions in rounds of at most `round_sessions`, whose cached records
        together count at most `bytes_in_flight` (a larger one alone): what one round holds
        at once while it folds and writes."""
        sessions: list[tuple[str, list[Delivery]]] = []
        held = 0
        for token, deliveries in by_token.items():
            cached = self._cache.get(token)
            size = 0 if cached is None else cached.size
            if sessions and (
                len(sessions) >= self._round_sessions or held + size > self._bytes_in_flight
            ):
                yield sessions
                sessions, held = [], 0
            sessions.append((token, deliveries))
            held += size
        if sessions:
            yield sessions

    async def _process_round(
        self, sessions: list[tuple[str, list[Delivery]]], report: BatchReport
    ) -> BaseException | None:
        """One round: the records not cached read at once, each session judged, the changed
        records written at once, then each session's acks. Returns the first failure."""
        misses = [token for token, _ in sessions if self._cache.get(token) is None]
        try:
            read = await self._store.read_many(misses) if misses else {}
        except Exception as exc:  # the round's sessions are redelivered
            return exc
        failures: list[BaseException] = []
        judged = await self._each(
            [self._prepare(token, items, report, read.get(token)) for token, items in sessions],
            failures,
        )
        written = await self._write_round(judged, report, failures)
        for item in written:
            try:
                await self._acknowledge(item, report)
            except Exception as exc:  # its deliveries are redelivered
                failures.append(exc)
        first = failures[0] if failures else None
        del failures
        return first

    async def _each(
        self, steps: list[Coroutine[Any, Any, _Judged]], failures: list[BaseException]
    ) -> list[_Judged]:
        """Run `steps` concurrently, up to `concurrency` at once; the results of those that
        finished, in order, and each failure appended to `failures`.

        Plain tasks, not `gather`: its futures and the failed tasks form reference cycles
        through each failure's frames, which kept every failed batch (its deliveries and
        states) alive until a full collection, minutes away in a projector that collects
        rarely; these tasks are freed as soon as this returns."""
        gate = asyncio.Semaphore(self._concurrency)

        async def gated(step: Coroutine[Any, Any, _Judged]) -> _Judged:
            async with gate:
                return await step

        tasks = [asyncio.ensure_future(gated(step)) for step in steps]
        try:
            if tasks:  # `asyncio.wait` refuses an empty set
                await asyncio.wait(tasks)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise
        results = []
        for task in tasks:
            failure = task.exception()  # each retrieved: no warning
            if failure is None:
                results.append(task.result())
            else:
                failures.append(failure)
            del failure  # no frame of a failure keeps this one alive
        del tasks
        return results

    @property
    def cached_bytes(self) -> int:
        """Bytes the cached records count against the budget (encoded value sizes)."""
        return self._cache.bytes

    @property
    def cache_evictions(self) -> int:
        """Records evicted from the cache beyond its budget so far."""
        return self._cache.evictions

    def _remember(self, token: str, value: bytes | None, revision: int | None) -> None:
        """Cache the session's value as the newest, then evict the oldest while over the
        byte budget."""
        # A copy of exactly its size: the encoder's output keeps the block it was grown in,
        # and thousands of those freed in LRU order left the heap several times the budget
        # (bench/results/projector_value_cache_ab.json).
        kept = None if value is None else memoryview(value).tobytes()
        self._cache.put(token, Kept(kept, revision))

    async def _slot(
        self, token: str, fresh: bool = False, read: tuple[bytes | None, int | None] | None = None
    ) -> Slot:
        """The session's record: cached, or as `read` (the round's read of it), or read now."""
        kept = None if fresh else self._cache.get(token)
        if kept is not None:
            value, revision = kept.value, kept.revision
        else:
            value, revision = await self._store.read(token) if read is None else read
            self._remember(token, value, revision)
        return Slot(decode_record(value), revision)

    async def _prepare(
        self,
        token: str,
        deliveries: list[Delivery],
        report: BatchReport,
        read: tuple[bytes | None, int | None] | None,
    ) -> _Judged:
        """The session's record after `deliveries`, their verdicts, and its poison in the DLQ."""
        started = time.perf_counter()
        profile = stages.PROFILE
        slot = await self._slot(token, read=read)
        since = 0.0 if profile is None else profile.now()
        stored = stored_of(deliveries)
        if profile is not None:
            since = profile.add("parse", since)
        record, verdicts, poison = await self._judge(token, slot.record, deliveries, stored)
        if profile is not None:
            profile.add("validate_chain_fold", since)
        if self._cache_looks_stale(slot, deliveries, verdicts):
            # Someone else wrote the bucket (a forget's tombstone, another replica while it
            # held the pin), or a write of ours landed though it failed here: re-read.
            cached_revision = slot.revision
            slot = await self._slot(token, fresh=True)
            if slot.revision != cached_revision:
                record, verdicts, poison = await self._judge(token, slot.record, deliveries, stored)
        if Verdict.GAP in verdicts:
            filled = await self._fill_gap(token, record, deliveries, verdicts)
            if filled:
                report.filled += len(filled)
                deliveries = sorted([*deliveries, *filled], key=lambda d: d.stream_seq)
                stored = stored_of(deliveries)
                record, verdicts, poison = await self._judge(token, slot.record, deliveries, stored)
        judged = _Judged(token, deliveries, stored, slot, record, verdicts, poison, started)
        await self._dead_letter(judged)
        return judged

    async def _dead_letter(self, judged: _Judged) -> None:
        """Copy poison to the DLQ before the degraded mark is written: if the copy fails,
        nothing is written or acked and the redelivery tries again."""
        for delivery, verdict in zip(judged.deliveries, judged.verdicts, strict=True):
            if verdict is Verdict.POISON and delivery.stream_seq not in judged.dead_lettered:
                code, reason = judged.poison[delivery.stream_seq]
                await self._dead_letters.send(delivery, judged.token, code, reason)
                judged.dead_lettered.add(delivery.stream_seq)
                log.warning(
                    "poison message", extra={"stream_seq": delivery.stream_seq, "code": code}
                )

    async def _write_round(
        self, judged: list[_Judged], report: BatchReport, failures: list[BaseException]
    ) -> list[_Judged]:
        """Write the round's changed records as atomic batches of about `bytes_in_flight`
        (a larger value alone), each record on its revision. Returns the sessions written or
        unchanged."""
        done = [item for item in judged if item.record is item.slot.record]
        profile = stages.PROFILE
        batch: list[tuple[_Judged, bytes]] = []
        held = 0
        for item in judged:
            if item.record is item.slot.record:
                continue
            since = 0.0 if profile is None else profile.now()
            value = _encoded(item.record)
            if profile is not None:
                profile.add("encode", since)
            batch.append((item, value))
            held += len(value)
            if held >= self._bytes_in_flight:
                done += await self._write_batch(batch, report, failures)
                batch, held = [], 0
        if batch:
            done += await self._write_batch(batch, report, failures)
        return done

    async def _write_batch(
        self,
        batch: list[tuple[_Judged, bytes]],
        report: BatchReport,
        failures: list[BaseException],
    ) -> list[_Judged]:
        """One atomic batch of compare-and-set writes; when it is refused or fails, its
        records one by one (`_write_alone`). Returns the sessions written."""
        writes = [(item.token, value, item.slot.revision) for item, value in batch]
        try:
            revisions = await self._store.write_many(writes)
        except Exception as exc:  # one by one tells which session it was
            log.warning("atomic write failed", extra={"error": type(exc).__name__})
            revisions = None
        if revisions is None:
            return await self._each(
                [self._write_alone(item, report) for item, _ in batch], failures
            )
        for (item, value), revision in zip(batch, revisions, strict=True):
            self._stored(item, revision, value, report)
        return [item for item, _ in batch]

    async def _write_alone(self, item: _Judged, report: BatchReport) -> _Judged:
        """The session's record written on its own, judged again on the bucket's record as
        long as another writer got there first."""
        for attempt in range(self._cas_retries + 1):
            if attempt:
                item.record, item.verdicts, item.poison = await self._judge(
                    item.token, item.slot.record, item.deliveries, item.stored
                )
                await self._dead_letter(item)
            if item.record is item.slot.record:
                break
            value = _encoded(item.record)
            try:
                revision = await self._store.write(item.token, value, item.slot.revision)
            except StaleRevision:
                report.cas_retries += 1
                item.slot = await self._slot(item.token, fresh=True)
                if attempt == self._cas_retries:
                    raise
                continue
            self._stored(item, revision, value, report)
            break
        return item

    def _stored(self, item: _Judged, revision: int, value: bytes, report: BatchReport) -> None:
        """The session's record is the bucket's now (`value`, at `revision`): cache it as such."""
        item.slot = Slot(item.record, revision)
        self._remember(item.token, value, revision)
        report.sessions_written += 1

    async def _acknowledge(self, item: _Judged, report: BatchReport) -> None:
        """Ack each delivery the record holds (or that is a duplicate or poison), nak each
        gap."""
        profile = stages.PROFILE
        since = 0.0 if profile is None else profile.now()
        for delivery, verdict in zip(item.deliveries, item.verdicts, strict=True):
            if isinstance(delivery, LoggedEvent):
                continue
            report.verdicts[verdict] += 1
            if verdict is Verdict.GAP:
                await delivery.nak(self._gap_delay_s)
            else:
                await delivery.ack()
        if profile is not None:
            # An ack only fills the client's write buffer: nothing else runs in between.
            profile.add("ack", since)
        self.last_apply_latency_s = time.perf_counter() - item.started

    async def _fill_gap(
        self, token: str, record: Record, deliveries: list[Delivery], verdicts: list[Verdict]
    ) -> list[LoggedEvent]:
        """The events missing between `record` (as this batch left it) and the batch's first
        gapped event, read from the stream's leader.

        Waiting for their redelivery is not enough: redeliveries come back spread over many
        fetches, and a session whose next event never shares a fetch with the record it
        follows is judged a gap in each, nak'ed, and comes back spread again (the soak found
        a projector applying nothing for minutes, every hot session in that state). Read
        here, they are applied in this batch; their own deliveries come back duplicates."""
        if self._log is None or not (record is None or isinstance(record, SessionState)):
            return []  # a tombstone: what was purged is not coming back
        first_gap = min(
            d.stream_seq for d, v in zip(deliveries, verdicts, strict=True) if v is Verdict.GAP
        )
        applied_through = 0 if record is None else record.stream_seq
        try:
            found = await self._log.events_between(
                token, applied_through, first_gap, self.GAP_FILL_LIMIT
            )
        except (TimeoutError, NatsError, JetStreamApiError) as exc:
            # The leader away or busy: the gapped events wait for their redelivery instead.
            log.warning("gap not filled", extra={"error": type(exc).__name__})
            return []
        delivered = {d.stream_seq for d in deliveries}
        return [event for event in found if event.stream_seq not in delivered]

    @staticmethod
    def _cache_looks_stale(slot: Slot, deliveries: list[Delivery], verdicts: list[Verdict]) -> bool:
        """A "duplicate" stored after what we applied, or a gap, may mean our copy is not
        the bucket's: a gap against a copy behind it would wait forever for events another
        replica applied and acked."""
        if not isinstance(slot.record, SessionState):
            return False
        applied_through = slot.record.stream_seq
        return any(
            verdict is Verdict.GAP
            or (verdict is Verdict.DUPLICATE and delivery.stream_seq > applied_through)
            for delivery, verdict in zip(deliveries, verdicts, strict=True)
        )

    async def _judge(
        self,
        token: str,
        record: Record,
        deliveries: list[Delivery],
        stored: list[StoredEvent | Unreadable],
    ) -> tuple[Record, list[Verdict], dict[int, tuple[str, str]]]:
        """`_decide`, then again with no gap final if the log says a gap is not."""
        decided = self._decide(record, deliveries, stored)
        if await self._gap_not_final(token, record, deliveries, decided[1], decided[2]):
            return self._decide(record, deliveries, stored, final=False)
        return decided

    async def _gap_not_final(
        self,
        token: str,
        record: Record,
        deliveries: list[Delivery],
        verdicts: list[Verdict],
        poison: dict[int, tuple[str, str]],
    ) -> bool:
        """True when a gap was judged final but the log does not show the missing events
        absent: the leader's first event of the session after the record is the gapped
        event itself only when they are not there. An earlier one will be redelivered; none,
        or a later one, is the answer of a leader that has not got the gapped event yet (a
        leader cut off from its cluster keeps answering until it steps down), which proves
        nothing, so the event waits for the next redelivery."""
        if self._log is None or not poison:
            return False
        gapped = [
            d.stream_seq
            for d, verdict in zip(deliveries, verdicts, strict=True)
            if verdict is Verdict.POISON and poison[d.stream_seq][0] == "gap"
        ]
        if not gapped:
            return False
        if isinstance(record, SessionState):
            applied_through = record.stream_seq
        elif record is None:
            applied_through = 0
        else:  # a tombstone: what was purged is not coming back
            return False
        first = await self._log.first_after(token, applied_through)
        if first == min(gapped):
            # Stream seqs only: what the judgement rested on, for whoever reads the DLQ.
            log.warning(
                "gap final",
                extra={
                    "applied_through": applied_through,
                    "first_after": first,
                    "gapped": min(gapped),
                    "redeliveries": max(d.num_delivered for d in deliveries),
                },
            )
        return first != min(gapped)

    def _decide(
        self,
        record: Record,
        deliveries: list[Delivery],
        stored: list[StoredEvent | Unreadable],
        final: bool = True,
    ) -> tuple[Record, list[Verdict], dict[int, tuple[str, str]]]:
        """Pure: the record after these deliveries, and a verdict for each (`core.projection`);
        with `final` False no gap is final, however often it came back."""
        gap_final = [final and d.num_delivered >= self._max_gap_redeliveries for d in deliveries]
        record, outcomes = project_all(record, stored, gap_is_final=gap_final)
        poison = {
            delivery.stream_seq: (outcome.code, outcome.reason)
            for delivery, outcome in zip(deliveries, outcomes, strict=True)
            if outcome.verdict is Verdict.POISON
        }
        return record, [outcome.verdict for outcome in outcomes], poison


def stored_of(deliveries: list[Delivery]) -> list[StoredEvent | Unreadable]:
    """Each delivery's body parsed once (no validation: `project` validates each event once)."""
    return [read_stored(d.data, d.stream_seq, d.subject) for d in deliveries]
