"""The projector's handling of gaps (SPEC §6.3): a session's missing event read from the log and
applied in the same batch, left to redelivery when the log cannot be read, final only when
the event is truly absent after the redeliveries, and a batch applied in stream order."""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.state import SessionState
from core import fold_all
from services.projector.apply import (
    LoggedEvent,
    Projector,
    Verdict,
)
from tests.unit.test_projector_rules import (
    FakeDelivery,
    FakeDlq,
    FakeStore,
    deliveries,
    session_log,
    stored_state,
)


@dataclass
class FakeLog:
    """The stream as its leader has it: the stream seqs of each session token's events."""

    seqs: dict[str, list[int]] = field(default_factory=dict)
    asked: int = 0
    #: The messages a read of the log returns, by token (none unless given: the log then
    #: has the seqs, but a read between two finds nothing, as from a leader behind).
    messages: dict[str, list[FakeDelivery]] = field(default_factory=dict)
    reads: list[tuple[int, int]] = field(default_factory=list)
    fail: bool = False

    async def first_after(self, token: str, after_seq: int) -> int | None:
        self.asked += 1
        return next((seq for seq in self.seqs.get(token, []) if seq > after_seq), None)

    async def events_between(
        self, token: str, after_seq: int, before_seq: int, limit: int
    ) -> list[LoggedEvent]:
        self.reads.append((after_seq, before_seq))
        if self.fail:
            raise TimeoutError
        found = [
            LoggedEvent(m.subject, m.data, m.stream_seq)
            for m in self.messages.get(token, [])
            if after_seq < m.stream_seq < before_seq
        ]
        return found[:limit]


async def test_a_gap_is_filled_from_the_log_and_applied_in_the_same_batch() -> None:
    """Redeliveries come back spread over many fetches: a session whose next event never
    shares a fetch with the record it follows would be a gap in every one (the soak found
    a projector applying nothing for minutes so). The missing events are read from the
    log's leader and applied with the batch; their own deliveries come back duplicates."""
    store, dlq = FakeStore(), FakeDlq()
    log = session_log()
    batch = deliveries(log)
    stream = FakeLog({"s1": [d.stream_seq for d in batch]}, messages={"s1": deliveries(log)})
    projector = Projector(store, dlq, log=stream)
    await projector.process([batch[0]])
    report = await projector.process([batch[3], batch[2]])
    assert stream.reads == [(1, 3)]
    assert report.filled == 1
    assert report.verdicts[Verdict.APPLIED] == 2 and report.verdicts[Verdict.GAP] == 0
    assert batch[2].acked and batch[3].acked and batch[2].naked is None
    assert stored_state(store, "s1") == fold_all(
        SessionState(), [(event, index + 1) for index, event in enumerate(log[:4])]
    )
    late = await projector.process([batch[1]])  # its own delivery, at last
    assert late.verdicts[Verdict.DUPLICATE] == 1 and batch[1].acked


async def test_a_gap_fill_that_cannot_read_the_log_leaves_the_gap_to_redelivery() -> None:
    store, dlq = FakeStore(), FakeDlq()
    log = session_log()
    batch = deliveries(log)
    stream = FakeLog({"s1": [d.stream_seq for d in batch]}, messages={"s1": batch}, fail=True)
    projector = Projector(store, dlq, log=stream)
    await projector.process([batch[0]])
    report = await projector.process([batch[2]])
    assert report.verdicts[Verdict.GAP] == 1 and report.filled == 0
    assert batch[2].naked == 0.5 and not batch[2].acked
    assert stored_state(store, "s1").session_seq == 1


async def test_a_gap_whose_missing_event_is_in_the_log_is_never_final() -> None:
    """The missing event exists (a crashed replica's batch, a partition): however often the
    gapped events came back, they are nak'ed and nothing is degraded; once the missing one
    is redelivered, the session catches up (the long fault run found sessions degraded by a
    count of redeliveries alone, their projections never caught up)."""
    store, dlq = FakeStore(), FakeDlq()
    log = session_log()
    batch = deliveries(log)
    stream = FakeLog({"s1": [item.stream_seq for item in batch]})
    projector = Projector(store, dlq, max_gap_redeliveries=3, log=stream)
    await projector.process([batch[0]])
    gapped = [batch[2], batch[3]]
    for item in gapped:
        item.num_delivered = 50
    report = await projector.process(list(gapped))
    assert report.verdicts[Verdict.GAP] == 2 and report.verdicts[Verdict.POISON] == 0
    assert dlq.sent == [] and stream.asked == 1
    assert [item.naked for item in gapped] == [0.5, 0.5]
    assert stored_state(store, "s1").degraded is None
    rest = deliveries(log)[1:]
    report = await projector.process(rest)
    assert report.verdicts[Verdict.APPLIED] == len(log) - 1
    assert stored_state(store, "s1").session_seq == len(log)


async def test_a_gap_whose_missing_event_is_not_in_the_log_is_final_after_the_redeliveries() -> (
    None
):
    store, dlq = FakeStore(), FakeDlq()
    log = session_log()
    batch = deliveries(log)
    stream = FakeLog({"s1": [1, 3, 4]})  # stream seq 2 is not there
    projector = Projector(store, dlq, max_gap_redeliveries=3, log=stream)
    await projector.process([batch[0]])
    batch[2].num_delivered = 2
    report = await projector.process([batch[2]])
    assert report.verdicts[Verdict.GAP] == 1 and stream.asked == 0  # not yet asked
    batch[2].num_delivered = 3
    report = await projector.process([batch[2]])
    assert report.verdicts[Verdict.POISON] == 1 and stream.asked == 1
    assert dlq.sent == [(3, "s1", "gap")]
    degraded = stored_state(store, "s1").degraded
    assert degraded is not None and degraded.stream_seq == 3


async def test_a_gap_judged_by_a_leader_behind_the_gapped_event_is_not_final() -> None:
    """A leader cut off from its cluster answers until it steps down, from a log that may
    lack what the new leader stored since: "nothing after the record", or a first event
    past the gapped one, proves nothing about the missing events (the long fault run found
    three sessions degraded so, their projections never caught up)."""
    for behind in ([1], [1, 4]):
        store, dlq = FakeStore(), FakeDlq()
        log = session_log()
        batch = deliveries(log)
        stream = FakeLog({"s1": behind})
        projector = Projector(store, dlq, max_gap_redeliveries=3, log=stream)
        await projector.process([batch[0]])
        batch[2].num_delivered = 30
        report = await projector.process([batch[2]])
        assert report.verdicts[Verdict.GAP] == 1 and report.verdicts[Verdict.POISON] == 0
        assert dlq.sent == [] and stream.asked == 1 and batch[2].naked == 0.5
        assert stored_state(store, "s1").degraded is None


async def test_a_batch_applies_a_sessions_events_in_stream_order_whatever_the_delivery_order() -> (
    None
):
    """A fetch returns redeliveries among new events: the later event, nak'ed many times,
    came back just ahead of the earlier one it waited for. Both are in the batch, so neither
    is a gap, however often they were delivered."""
    store, dlq = FakeStore(), FakeDlq()
    log = session_log()
    batch = deliveries(log)
    stream = FakeLog({"s1": [item.stream_seq for item in batch]})
    projector = Projector(store, dlq, max_gap_redeliveries=3, log=stream)
    await projector.process([batch[0]])
    late, early = batch[2], batch[1]
    late.num_delivered = early.num_delivered = 30
    report = await projector.process([late, early])
    assert report.verdicts[Verdict.APPLIED] == 2 and report.verdicts[Verdict.POISON] == 0
    assert dlq.sent == [] and late.acked and early.acked
    assert stored_state(store, "s1").session_seq == 3


async def test_a_gap_against_a_cached_record_behind_the_bucket_reads_the_bucket_again() -> None:
    """Another replica held the pin for a while: it applied and acked the session's next
    events and wrote the bucket, so they never come here again. The copy cached here is
    behind; a gap against it is read again from the bucket, not waited on forever."""
    store, dlq = FakeStore(), FakeDlq()
    batch = deliveries(session_log())
    here, there = Projector(store, dlq), Projector(store, dlq)
    await here.process([batch[0]])
    await there.process([batch[1], batch[2]])  # the pin moved away, then back
    report = await here.process([batch[3]])
    assert report.verdicts[Verdict.APPLIED] == 1 and report.verdicts[Verdict.GAP] == 0
    assert batch[3].acked and batch[3].naked is None
    assert stored_state(store, "s1").session_seq == 4
