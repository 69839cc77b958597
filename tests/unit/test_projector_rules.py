"""The projector's batch rules (SPEC §6.3–§6.4), with an in-memory bucket and DLQ."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson
import pytest

from contracts.events import Event
from contracts.records import Tombstone
from contracts.state import SessionState
from core import canonical_json, fold_all
from core.canonical import event_subject
from services.adapters.record_codec import decode_record, encode_state
from services.projector.apply import (
    BatchReport,
    Delivery,
    Projector,
    StaleRevision,
    Verdict,
)
from tests.support import Driver


@dataclass
class FakeDelivery:
    subject: str
    data: bytes
    stream_seq: int
    num_delivered: int = 1
    acked: bool = False
    naked: float | None = None

    async def ack(self) -> None:
        self.acked = True

    async def nak(self, delay_s: float) -> None:
        self.naked = delay_s


@dataclass
class FakeStore:
    values: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    writes: int = 0
    batches: int = 0
    interfere: bytes | None = None

    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        if token in self.values:
            return self.values[token]
        return None, None

    def another_writer_first(self, token: str) -> None:
        if self.interfere is not None:  # another replica writes first, once
            current = self.values.get(token, (b"", 0))[1]
            self.values[token] = (self.interfere, current + 1)
            self.interfere = None

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        self.another_writer_first(token)
        current_revision = self.values.get(token, (b"", None))[1]
        if current_revision != revision:
            raise StaleRevision(token)
        self.writes += 1
        new_revision = (revision or 0) + 1
        self.values[token] = (value, new_revision)
        return new_revision

    async def read_many(self, tokens: Sequence[str]) -> dict[str, tuple[bytes | None, int | None]]:
        return {token: await self.read(token) for token in tokens}

    async def write_many(self, writes: Sequence[tuple[str, bytes, int | None]]) -> list[int] | None:
        """All or none, as the bucket's atomic batch: None when a revision is stale."""
        self.batches += 1
        self.another_writer_first(writes[-1][0])
        if any(self.values.get(token, (b"", None))[1] != revision for token, _, revision in writes):
            return None
        return [await self.write(token, value, revision) for token, value, revision in writes]


@dataclass
class FakeDlq:
    sent: list[tuple[int, str, str]] = field(default_factory=list)

    async def send(self, delivery: Delivery, token: str, code: str, reason: str) -> None:
        self.sent.append((delivery.stream_seq, token, code))


def deliveries(events: list[Event], first_seq: int = 1) -> list[FakeDelivery]:
    return [
        FakeDelivery(
            event_subject(event.kind, event.session_id),
            orjson.dumps(event.to_wire()),
            first_seq + index,
        )
        for index, event in enumerate(events)
    ]


def session_log(session_id: str = "s1") -> list[Event]:
    driver = Driver(session_id)
    driver.inject("a", ttl_turns=2, dedupe_key="k")
    driver.inject("b", dedupe_key="k")
    driver.ok("render", turn=0)
    driver.ok("end_turn", turn=0)
    return driver.log


def stored_state(store: FakeStore, token: str) -> SessionState:
    record = decode_record(store.values[token][0])
    assert isinstance(record, SessionState)
    return record


async def test_a_batch_is_applied_and_written_once_per_session() -> None:
    store, dlq = FakeStore(), FakeDlq()
    log_a, log_b = session_log("a"), session_log("b")
    batch = deliveries(log_a) + deliveries(log_b, first_seq=100)
    report = await Projector(store, dlq).process(list(batch))
    assert report.verdicts[Verdict.APPLIED] == len(batch)
    assert store.writes == 2 and store.batches == 1  # both in one atomic batch
    assert all(item.acked for item in batch)
    expected = fold_all(SessionState(), [(e, i + 1) for i, e in enumerate(log_a)])
    assert canonical_json(stored_state(store, "a").model_dump(mode="json")) == canonical_json(
        expected.model_dump(mode="json")
    )
    assert stored_state(store, "a").stream_seq == len(log_a)


async def test_a_redelivered_event_is_acked_and_changes_nothing() -> None:
    store, dlq = FakeStore(), FakeDlq()
    log = session_log()
    projector = Projector(store, dlq)
    await projector.process(list(deliveries(log)))
    before = dict(store.values)
    again = deliveries(log[:2])
    report = await projector.process(list(again))
    assert report.verdicts[Verdict.DUPLICATE] == 2
    assert all(item.acked for item in again)
    assert store.values == before


async def test_a_gap_is_nakked_with_a_delay_and_later_events_wait_too() -> None:
    store, dlq = FakeStore(), FakeDlq()
    log = session_log()
    batch = deliveries(log)
    gapped = [batch[0], batch[2], batch[3]]
    report = await Projector(store, dlq, gap_delay_s=0.25).process(list(gapped))
    assert report.verdicts[Verdict.APPLIED] == 1
    assert report.verdicts[Verdict.GAP] == 2
    assert [item.naked for item in gapped] == [None, 0.25, 0.25]
    assert stored_state(store, "s1").session_seq == 1


async def test_a_poison_message_goes_to_the_dlq_marks_the_session_and_never_stalls() -> None:
    store, dlq = FakeStore(), FakeDlq()
    good = session_log("good")
    poison = FakeDelivery("transcript.reminder.injected.bad", b"{not json", 7)
    unknown = FakeDelivery(
        "transcript.reminder.injected.bad2", orjson.dumps({"schema": "reminder-ledger.event/v9"}), 8
    )
    batch = [poison, unknown, *deliveries(good, first_seq=9)]
    report = await Projector(store, dlq).process(list(batch))
    assert dlq.sent == [(7, "bad", "undecodable"), (8, "bad2", "unknown_schema")]
    assert all(item.acked for item in batch)
    assert report.verdicts[Verdict.APPLIED] == len(good)
    degraded = stored_state(store, "bad").degraded
    assert degraded is not None and degraded.stream_seq == 7


async def test_an_event_whose_chain_does_not_follow_is_poison() -> None:
    store, dlq = FakeStore(), FakeDlq()
    log = session_log()
    tampered = log[1].to_wire()
    tampered["payload"]["replaced_ids"] = ["forged"]
    batch = deliveries(log)
    batch[1].data = orjson.dumps(tampered)
    report = await Projector(store, dlq).process(list(batch))
    assert report.verdicts[Verdict.APPLIED] == 1
    assert report.verdicts[Verdict.POISON] == 1
    assert report.verdicts[Verdict.SKIPPED] == len(log) - 2
    state = stored_state(store, "s1")
    assert state.session_seq == 1
    assert state.degraded is not None and state.degraded.code == "broken_chain"


async def test_a_concurrent_write_is_caught_by_compare_and_set_and_redone() -> None:
    log = session_log()
    first_half = fold_all(SessionState(), [(e, i + 1) for i, e in enumerate(log[:2])])
    store, dlq = FakeStore(interfere=encode_state(first_half)), FakeDlq()
    report = await Projector(store, dlq).process(list(deliveries(log)))
    assert report.cas_retries == 1
    assert stored_state(store, "s1").session_seq == len(log)


async def test_a_batch_refused_for_one_stale_revision_is_written_one_by_one() -> None:
    """The atomic batch stores nothing when one revision is stale: every session of it is
    then written alone, the stale one judged again on what the other writer stored."""
    log_a, log_b = session_log("a"), session_log("b")
    first_half = fold_all(SessionState(), [(e, i + 1) for i, e in enumerate(log_b[:2])])
    store, dlq = FakeStore(interfere=encode_state(first_half)), FakeDlq()
    batch = deliveries(log_a) + deliveries(log_b, first_seq=100)
    report = await Projector(store, dlq).process(list(batch))
    assert store.batches == 1 and report.cas_retries == 1
    assert stored_state(store, "a").session_seq == len(log_a)
    assert stored_state(store, "b").session_seq == len(log_b)
    assert all(item.acked for item in batch)


@pytest.mark.parametrize(("round_sessions", "rounds"), [(1, 5), (2, 3), (256, 1)])
async def test_sessions_not_cached_are_read_and_written_a_round_at_a_time(
    round_sessions: int, rounds: int
) -> None:
    logs = {name: session_log(name) for name in "abcde"}
    batch = [d for i, log in enumerate(logs.values()) for d in deliveries(log, 100 * i)]
    store = CountingStore()
    report = await Projector(store, FakeDlq(), round_sessions=round_sessions).process(batch)
    assert report.verdicts[Verdict.APPLIED] == len(batch)
    assert (store.read_calls, store.reads, store.batches) == (rounds, len(logs), rounds)
    assert all(stored_state(store, name).session_seq == len(logs[name]) for name in logs)


async def test_a_rounds_writes_go_in_atomic_batches_of_about_the_bytes_in_flight() -> None:
    """Records not cached count nothing toward a round's bytes (their size is unknown until
    read), so a round's writes are cut again by their encoded size."""
    logs = {name: session_log(name) for name in "abcde"}
    batch = [d for i, log in enumerate(logs.values()) for d in deliveries(log, 100 * i)]
    store = CountingStore()
    value = len(
        encode_state(fold_all(SessionState(), [(e, 1 + i) for i, e in enumerate(logs["a"])]))
    )
    projector = Projector(store, FakeDlq(), bytes_in_flight=2 * value)
    report = await projector.process(batch)
    assert report.verdicts[Verdict.APPLIED] == len(batch)
    assert store.read_calls == 1 and store.batches == 3  # two, two, then the last alone
    assert all(stored_state(store, name).session_seq == len(logs[name]) for name in logs)


async def test_a_tombstone_keeps_a_forgotten_session_from_coming_back() -> None:
    log = session_log()
    tombstone = Tombstone(
        session_token="s1", purged_through=50, forgotten_at="2026-11-29T00:00:00.000Z"
    )
    store, dlq = FakeStore(values={"s1": (orjson.dumps(tombstone.model_dump()), 3)}), FakeDlq()
    report = await Projector(store, dlq).process(list(deliveries(log)))
    assert report.verdicts[Verdict.SKIPPED] == len(log)
    assert isinstance(decode_record(store.values["s1"][0]), Tombstone)
    # A new life of the same session id, after the purge, is projected afresh.
    fresh = deliveries(session_log(), first_seq=51)
    await Projector(store, dlq).process(list(fresh))
    assert stored_state(store, "s1").session_seq == len(log)


class FailingDlq(FakeDlq):
    async def send(self, delivery: Delivery, token: str, code: str, reason: str) -> None:
        raise ConnectionError("dlq unreachable")


async def test_a_poison_message_is_not_marked_or_acked_until_its_dlq_copy_is_stored() -> None:
    store = FakeStore()
    poison = FakeDelivery("transcript.reminder.injected.bad", b"{not json", 7)
    with pytest.raises(ConnectionError):
        await Projector(store, FailingDlq()).process([poison])
    assert store.values == {} and not poison.acked
    dlq = FakeDlq()
    await Projector(store, dlq).process([poison])
    assert dlq.sent == [(7, "bad", "undecodable")] and poison.acked


@dataclass
class CountingStore(FakeStore):
    reads: int = 0
    read_calls: int = 0

    async def read(self, token: str) -> tuple[bytes | None, int | None]:
        self.reads += 1
        return await super().read(token)

    async def read_many(self, tokens: Sequence[str]) -> dict[str, tuple[bytes | None, int | None]]:
        self.read_calls += 1
        return await super().read_many(tokens)


async def test_the_cache_stays_within_its_byte_budget_and_an_evicted_session_is_read_back() -> None:
    store, dlq = CountingStore(), FakeDlq()
    log_a, log_b = session_log("a"), session_log("b")
    two = fold_all(SessionState(), [(e, i + 1) for i, e in enumerate(log_a[:2])])
    budget = len(encode_state(two)) * 3 // 2
    projector = Projector(store, dlq, cache_bytes=budget)
    await projector.process(list(deliveries(log_a[:2])))
    assert projector.cache_evictions == 0
    await projector.process(list(deliveries(log_b[:2], first_seq=100)))
    assert 0 < projector.cached_bytes <= budget
    assert projector.cache_evictions == 1
    reads = store.reads
    # Both did not fit: "a", the least recently used, was evicted and is read back.
    await projector.process(list(deliveries(log_a)))
    assert store.reads == reads + 1
    assert stored_state(store, "a").session_seq == len(log_a)
    assert stored_state(store, "b").session_seq == 2


async def test_the_cache_holds_each_session_as_its_written_bytes_and_is_not_read_back() -> None:
    store, dlq = CountingStore(), FakeDlq()
    log = session_log("a")
    projector = Projector(store, dlq)
    await projector.process(list(deliveries(log[:2])))
    # What is counted is exactly the value written: the bytes themselves are what is held.
    assert projector.cached_bytes == len(store.values["a"][0])
    reads, read_calls = store.reads, store.read_calls
    await projector.process(list(deliveries(log, first_seq=1)))
    # The cached session was decoded from its bytes, not read back, and went on from there.
    assert (store.reads, store.read_calls) == (reads, read_calls)
    assert stored_state(store, "a") == fold_all(
        SessionState(), [(e, i + 1) for i, e in enumerate(log)]
    )
    assert projector.cached_bytes == len(store.values["a"][0])


async def test_a_session_failing_its_write_leaves_the_others_written_and_acked() -> None:
    @dataclass
    class Unreachable(FakeStore):
        async def write(self, token: str, value: bytes, revision: int | None) -> int:
            if token == "down":
                raise ConnectionError("bucket unreachable")
            return await super().write(token, value, revision)

        async def write_many(
            self, writes: Sequence[tuple[str, bytes, int | None]]
        ) -> list[int] | None:
            if any(token == "down" for token, _, _ in writes):
                raise ConnectionError("bucket unreachable")
            return await super().write_many(writes)

    store, dlq = Unreachable(), FakeDlq()
    ok, down = deliveries(session_log("ok")), deliveries(session_log("down"), first_seq=100)
    report = BatchReport()
    with pytest.raises(ConnectionError):
        await Projector(store, dlq).process([*down, *ok], report)
    assert all(item.acked for item in ok) and not any(item.acked for item in down)
    assert stored_state(store, "ok").session_seq == len(ok)
    # The caller's report still counts what was acked, for the metrics.
    assert report.verdicts[Verdict.APPLIED] == len(ok)
    assert sum(report.verdicts.values()) == len(ok)


def test_a_busy_worker_s_process_collects_young_garbage_less_often_and_freezes_start_up() -> None:
    import gc

    from services.adapters.memory import COLLECT_AFTER_ALLOCATIONS, collect_less_often

    before = gc.get_threshold()
    try:
        collect_less_often()
        assert gc.get_threshold() == (COLLECT_AFTER_ALLOCATIONS, *before[1:])
        assert before[0] < COLLECT_AFTER_ALLOCATIONS
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_the_projector_collects_young_garbage_less_often_than_other_workers() -> None:
    """Its batches hold tens of thousands of objects at once (see the constant's comment)."""
    import gc

    from services.adapters.memory import (
        COLLECT_AFTER_ALLOCATIONS,
        PROJECTOR_COLLECT_AFTER_ALLOCATIONS,
        collect_less_often,
    )

    before = gc.get_threshold()
    try:
        collect_less_often(PROJECTOR_COLLECT_AFTER_ALLOCATIONS)
        assert gc.get_threshold() == (PROJECTOR_COLLECT_AFTER_ALLOCATIONS, *before[1:])
        assert PROJECTOR_COLLECT_AFTER_ALLOCATIONS > COLLECT_AFTER_ALLOCATIONS
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@dataclass
class SlowStore(FakeStore):
    """A bucket whose writes take a moment, counting the bytes written at once."""

    writing: int = 0
    most_at_once: int = 0

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        self.writing += len(value)
        self.most_at_once = max(self.most_at_once, self.writing)
        await asyncio.sleep(0.01)
        self.writing -= len(value)
        return await super().write(token, value, revision)

    async def write_many(self, writes: Sequence[tuple[str, bytes, int | None]]) -> list[int] | None:
        """One batch: every value of it in flight at once."""
        self.writing += sum(len(value) for _, value, _ in writes)
        self.most_at_once = max(self.most_at_once, self.writing)
        await asyncio.sleep(0.01)
        self.writing -= sum(len(value) for _, value, _ in writes)
        if any(self.values.get(token, (b"", None))[1] != revision for token, _, revision in writes):
            return None
        return [await FakeStore.write(self, *write) for write in writes]


@pytest.mark.parametrize("budget_in_values", [2.5, 100])
async def test_writes_of_large_sessions_hold_at_most_the_bytes_in_flight_budget(
    budget_in_values: float,
) -> None:
    logs = [session_log(name) for name in "abcdef"]
    # Every session's events but its last, then the last: its value grows a little, as a
    # long session's does from one batch to the next.
    first = [d for i, log in enumerate(logs) for d in deliveries(log[:-1], 100 * i)]
    last = [d for i, log in enumerate(logs) for d in deliveries(log[-1:], 100 * i + len(log) - 1)]
    store = SlowStore()
    await Projector(store, FakeDlq()).process(list(first))
    cached = max(len(value) for value, _ in store.values.values())
    budget = int(budget_in_values * cached)
    projector = Projector(store, FakeDlq(), bytes_in_flight=budget)
    await projector.process(list(first))  # all duplicates: caches every record
    store.most_at_once = 0
    report = await projector.process(list(last))
    assert report.verdicts[Verdict.APPLIED] == len(logs)
    written = max(len(value) for value, _ in store.values.values())
    if budget_in_values < len(logs):
        # Two at a time: what the cache knew of each, and what each wrote, about the same.
        assert store.most_at_once <= 2 * written < 3 * cached
    else:
        assert store.most_at_once >= len(logs) * cached  # all at once when they fit


@dataclass
class UnreachableStore(FakeStore):
    """A store whose writes fail as while NATS is away (the batch is redelivered)."""

    async def write(self, token: str, value: bytes, revision: int | None) -> int:
        raise ConnectionError("the bucket did not answer")

    async def write_many(self, writes: Sequence[tuple[str, bytes, int | None]]) -> list[int] | None:
        raise ConnectionError("the bucket did not answer")


async def test_a_failed_batch_is_freed_at_once_not_by_the_cycle_collector() -> None:
    """A batch that fails must not stay alive in a reference cycle (its failure's traceback
    holding the frame that holds the failure) until the next full collection: a projector
    that collects rarely kept every failed batch's deliveries and states for minutes."""
    batch = deliveries(session_log("a")) + deliveries(session_log("b"), first_seq=100)
    alive = [weakref.ref(delivery) for delivery in batch]
    projector = Projector(UnreachableStore(), FakeDlq())
    gc.disable()
    try:
        failed = False
        try:
            await projector.process(batch)
        except ConnectionError:
            failed = True
        del batch
        assert failed
        assert [ref() for ref in alive if ref() is not None] == []
    finally:
        gc.enable()


async def test_an_empty_batch_is_an_empty_report() -> None:
    report = await Projector(FakeStore(), FakeDlq()).process([])
    assert report.sessions_written == 0 and not any(report.verdicts.values())
