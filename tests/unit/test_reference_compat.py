"""Reference-runtime compatibility (issue #13): trimmed bodies, tags kept once,
`dropped_reminder_ids`, and the compaction dedupe of SPEC §4.8 step 2b."""

from __future__ import annotations

from contracts import events as ev
from contracts.stored import StoredEvent
from contracts.subjects import event_subject
from core.canonical import chain_link
from replay.verify import verify
from tests.support import Driver


def _rows(driver: Driver) -> list[StoredEvent]:
    return [
        StoredEvent(e.to_wire(), n, event_subject(e.kind, e.session_id))
        for n, e in enumerate(driver.log, 1)
    ]


def test_a_body_is_stored_trimmed_and_a_repeated_tag_kept_once() -> None:
    driver = Driver()
    driver.inject("\n  run the tests \t\n", tags=["a", " b ", "a", "b", "c"])
    spec = driver.state.pending[0].spec
    assert spec.body == "run the tests"
    assert spec.tags == ["a", "b", "c"]
    injected = driver.log[-1].payload
    assert isinstance(injected, ev.Injected)
    assert injected.reminder.body == "run the tests" and injected.tags == ["a", "b", "c"]


def test_a_deduped_event_names_the_dropped_ids_under_both_names() -> None:
    driver = Driver()
    first = driver.inject("one", dedupe_key="k")
    decision = driver.run("inject", reminder={"body": "two", "dedupe_key": "k"})
    deduped = decision.events[0].payload
    assert isinstance(deduped, ev.Deduped)
    assert deduped.replaced_ids == deduped.dropped_reminder_ids == [first]
    assert decision.events[0].to_wire()["payload"]["dropped_reminder_ids"] == [first]


def test_compaction_keeps_only_the_newest_preserved_survivor_of_each_key() -> None:
    driver = Driver()
    # audit_only reminders are exempt from inject-time dedupe, so a key can be live twice.
    old = driver.inject("old", mode="audit_only", dedupe_key="k", preserve_on_compact=True)
    driver.ok("checkpoint", seam="loop_exit", turn=0)
    older_other = driver.inject("x1", mode="audit_only", dedupe_key="j", preserve_on_compact=True)
    driver.ok("checkpoint", seam="loop_exit", turn=0)
    new = driver.inject("new", dedupe_key="k", preserve_on_compact=True)
    other = driver.inject("x2", dedupe_key="j", preserve_on_compact=True)
    lone = driver.inject("lone", dedupe_key="solo", preserve_on_compact=True)
    assert set(driver.pending_ids()) == {old, older_other, new, other, lone}

    decision = driver.run("compact", turn=1)
    kinds = driver.kinds(decision)
    assert kinds == ["deduped", "deduped", "compacted"]
    first, second = (e.payload for e in decision.events[:2])
    assert isinstance(first, ev.Deduped) and isinstance(second, ev.Deduped)
    assert (first.boundary, first.reminder_id, first.replaced_ids) == ("compact", new, [old])
    assert first.dropped_reminder_ids == [old] and first.dedupe_key == "k"
    assert (second.reminder_id, second.replaced_ids) == (other, [older_other])
    compacted = decision.events[-1].payload
    assert isinstance(compacted, ev.Compacted)
    assert compacted.preserved_ids == [new, other, lone]
    assert decision.reply["preserved_count"] == 3
    assert driver.pending_ids() == [new, other, lone]
    assert verify(_rows(driver)) is None


def test_verify_flags_a_compaction_that_kept_two_survivors_of_one_key() -> None:
    driver = Driver()
    driver.inject("old", mode="audit_only", dedupe_key="k", preserve_on_compact=True)
    driver.ok("checkpoint", seam="loop_exit", turn=0)
    driver.inject("new", dedupe_key="k", preserve_on_compact=True)
    driver.ok("compact", turn=1)
    rows = _rows(driver)
    tampered = [row for row in rows if row.envelope["kind"] != "deduped"]
    # Re-chain without the deduped event so only the rule check can object.
    previous, fixed = "", []
    for seq, row in enumerate(tampered, 1):
        body = {k: v for k, v in row.envelope.items() if k != "chain"}
        body["session_seq"] = seq
        previous = chain_link(previous, body)
        fixed.append(StoredEvent({**body, "chain": previous}, seq, row.subject))
    problem = verify(fixed)
    assert problem is not None and "preserved" in problem
