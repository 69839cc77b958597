"""`fold(state, event) -> state`: apply exactly what each event records (SPEC §3.6).

No rule is re-run here: TTL decrements, removals and envelope texts all come from payloads.
Folding works on a mutable scratch copy and freezes once, so folding a batch costs one copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, get_origin

from contracts import events as ev
from contracts.events import AckOutcome
from contracts.state import (
    FULL_ENVELOPE_TEXT_BYTES,
    FULL_ENVELOPES_KEPT,
    RECENT_REPLIES_BYTES,
    RECENT_REPLIES_KEPT,
    ActiveMute,
    DegradedMark,
    DeliveredDigest,
    DeliveredEnvelope,
    PendingRow,
    ProviderMark,
    ProvidersState,
    QueuedRow,
    RecentReply,
    SessionState,
)
from contracts.trusted import trusted
from core.canonical import sha256_hex
from core.kept import KeptRun, history_of
from core.rules import remembered_reply, ttl_pass_due
from core.size import KeptOnce, MeasuredOnce, digest_bytes, json_bytes, stored_bytes

#: `SessionState`'s fields in order; `Scratch` has exactly these (checked at import).
STATE_FIELDS: tuple[str, ...] = tuple(SessionState.model_fields)


#: The list and dict fields, copied so a scratch never changes the state it came from
#: (their rows are frozen models, so a shallow copy is enough).
_CONTAINERS: tuple[str, ...] = tuple(
    name
    for name, info in SessionState.model_fields.items()
    if get_origin(info.annotation) in (list, dict)
)


def _copy_containers(values: dict[str, Any]) -> dict[str, Any]:
    for name in _CONTAINERS:
        values[name] = values[name].copy()
    return values


def _append_once(ids: list[str], index: set[str] | None, item: str) -> set[str]:
    """Append `item` to `ids` unless it is there; `index` is the set of `ids`, built when
    None. Returns the set."""
    index = set(ids) if index is None else index
    if item not in index:
        index.add(item)
        ids.append(item)
    return index


@dataclass
class Scratch:
    """A mutable copy of `SessionState` used while folding or deciding.

    Its fields are `SessionState`'s, same names and types: `thaw` and `freeze` copy them
    by name, this module refuses to import if the names differ, and a unit test compares
    the types. Both stay plain attribute copies: no pydantic validation on the hot path.
    """

    session_id: str
    session_seq: int
    stream_seq: int
    turn: int
    last_ended_turn: int | None
    queued: list[QueuedRow]
    pending: list[PendingRow]
    delivered: list[DeliveredEnvelope | DeliveredDigest]
    compactions: int
    counters: dict[str, int]
    revoked_ids: list[str]
    seen_ids: list[str]
    recent_replies: list[RecentReply]
    inherited_from: list[str]
    nonce: str | None
    degraded: DegradedMark | None
    chain_head: str
    providers: ProvidersState | None
    mutes: list[ActiveMute]
    last_occurred_at: str | None
    fired_ids: list[str]
    acknowledged: dict[str, list[AckOutcome]]
    # Sets of `seen_ids` and `fired_ids`, built on first use: most events need neither.
    _seen: set[str] | None = field(default=None, repr=False)
    _fired: set[str] | None = field(default=None, repr=False)
    # The request ids of `recent_replies` (`remembered_row`), when the state thawed had them
    # indexed: kept up to date as rows come and go, and handed to the state released.
    _replies: dict[str, RecentReply] | None = field(default=None, repr=False)
    # The stored bytes of the history ids (`history_bytes`), when the state thawed had them
    # measured: these lists only grow, so each id added is counted as it comes, and the
    # count is handed to the state released.
    _history: int | None = field(default=None, repr=False)
    # The run of envelopes kept in full at the end of `delivered`, summed (`kept_run`), when
    # the state thawed had it: kept up to date as envelopes come and become digests.
    _kept: KeptRun | None = field(default=None, repr=False)

    @classmethod
    def thaw(cls, state: SessionState) -> Scratch:
        """A scratch copy whose lists can be changed without touching `state`."""
        scratch = cls(**_copy_containers(state.__dict__.copy()))
        index = _REPLY_INDEX.known(state)
        if index is not None:
            scratch._replies = dict(index)
        scratch._history = _HISTORY_BYTES.known(state)
        scratch._kept = _KEPT_RUNS.known(state)
        scratch._seen, scratch._fired = _ID_SETS.take(state) or (None, None)
        return scratch

    def freeze(self) -> SessionState:
        """The immutable state; rows are already validated models."""
        values = {name: getattr(self, name) for name in STATE_FIELDS}
        return trusted(SessionState, _copy_containers(values))

    def release(self) -> SessionState:
        """`freeze` for the scratch's last use: the state takes over its lists and dicts
        instead of copies, so the scratch must not change afterwards."""
        state = trusted(SessionState, {name: getattr(self, name) for name in STATE_FIELDS})
        if self._replies is not None:
            _REPLY_INDEX.put(state, self._replies)
        if self._history is not None:
            _HISTORY_BYTES.put(state, self._history)
        if self._kept is not None:
            _KEPT_RUNS.put(state, self._kept)
        self._hand_sets_to(state)
        return state

    def _hand_sets_to(self, state: SessionState) -> None:
        """Give the id sets this scratch holds to `state`, whose next scratch takes them
        over and adds to them: this one keeps no reference to them."""
        if self._seen is not None or self._fired is not None:
            _ID_SETS.put(state, (self._seen, self._fired))
            self._seen = self._fired = None

    def give_back(self, state: SessionState) -> None:
        """Hand the id sets this scratch holds back to `state`, the state it was thawed from,
        if its id lists are still the state's (a command that decided no events): the
        state's next scratch then takes them instead of building them again. The lists only
        grow, so the same lengths are the same lists."""
        unchanged = len(self.seen_ids) == len(state.seen_ids) and len(self.fired_ids) == len(
            state.fired_ids
        )
        if unchanged:
            self._hand_sets_to(state)

    def history_bytes(self) -> int:
        """An upper bound of the stored bytes of what only a long history grows: the ids in
        `seen_ids`, `revoked_ids` and `fired_ids` and those `acknowledged` (each with its
        quotes and a comma), and the delivered rows before the newest full envelopes (the
        digests of older ones). Measured in full once per session, then kept as they grow."""
        if self._history is None:
            self._history = history_of(self)
        return self._history

    def kept_run(self) -> KeptRun:
        """The run of envelopes kept in full at the end of `delivered`, summed: measured
        once per session, then kept up to date as envelopes come and become digests."""
        if self._kept is None:
            self._kept = KeptRun.of(self.delivered)
        return self._kept

    def deliver(self, row: DeliveredEnvelope) -> None:
        """Add a delivered envelope at the end of `delivered`, where the kept run ends."""
        self.delivered.append(row)
        if self._kept is not None:
            self._kept = self._kept.appended(row)

    def _count_history(self, ids: list[str], size_before: int) -> None:
        """Count the id `ids` may have gained (it had `size_before` items)."""
        if len(ids) > size_before:
            self._add_history(stored_bytes(ids[-1]) + 3)

    def _add_history(self, size: int) -> None:
        """Count `size` more bytes of history, if the history is measured yet."""
        if self._history is not None:
            self._history += size

    def remember(self, row: RecentReply) -> None:
        """Remember a command's reply, within the window's count and bytes (§4.1.1)."""
        self.recent_replies.append(row)
        evicted = _evict_replies(self.recent_replies)
        index = self._replies
        if index is None:
            return
        if row.request_id in index:  # a request id twice: the index is built again on use
            self._replies = None
            return
        index[row.request_id] = row
        for gone in evicted:
            del index[gone.request_id]

    def see(self, reminder_id: str) -> None:
        """Remember an id for `revoke`'s unknown/already-delivered distinction."""
        size = len(self.seen_ids)
        self._seen = _append_once(self.seen_ids, self._seen, reminder_id)
        self._count_history(self.seen_ids, size)

    def fire(self, reminder_id: str) -> None:
        """Remember an id as fired at least once, for `acknowledge`."""
        size = len(self.fired_ids)
        self._fired = _append_once(self.fired_ids, self._fired, reminder_id)
        self._count_history(self.fired_ids, size)

    def has_seen(self, reminder_id: str) -> bool:
        """Whether `reminder_id` is in `seen_ids`, by their set (built once, then carried)."""
        if self._seen is None:
            self._seen = set(self.seen_ids)
        return reminder_id in self._seen

    def has_fired(self, reminder_id: str) -> bool:
        """Whether `reminder_id` is in `fired_ids`, by their set (built once, then carried)."""
        if self._fired is None:
            self._fired = set(self.fired_ids)
        return reminder_id in self._fired

    def acknowledge(self, reminder_id: str, outcome: AckOutcome) -> None:
        """Record an outcome; a reminder acknowledged first adds its id to the history."""
        earlier = self.acknowledged.get(reminder_id)
        if earlier is None:
            self._add_history(stored_bytes(reminder_id) + 3)
        self.acknowledged[reminder_id] = [*(earlier or []), outcome]

    def digest_delivered(self, index: int) -> None:
        """Keep the delivered envelope at `index` as its digest, which joins the history."""
        old = self.delivered[index]
        assert isinstance(old, DeliveredEnvelope)
        digest = DeliveredDigest(
            turn_number=old.turn_number,
            directive_ids=old.directive_ids,
            text_sha256=sha256_hex(old.text),
        )
        self.delivered[index] = digest
        self._add_history(digest_bytes(digest))
        if self._kept is not None:
            # The fold digests the run's first row; any other leaves it measured again.
            self._kept = self._kept.without_first(old) if index == self._kept.start else None

    def clear_delivered(self) -> None:
        """Drop every delivered row; the history (their digests) is measured again."""
        self.delivered = []
        self._history = None
        self._kept = None

    def revoke(self, reminder_id: str) -> None:
        """Remember an id as revoked, once."""
        if reminder_id not in self.revoked_ids:
            size = len(self.revoked_ids)
            self.revoked_ids.append(reminder_id)
            self._count_history(self.revoked_ids, size)

    def drop_pending(self, ids: Iterable[str]) -> None:
        """Remove live reminders by id."""
        gone = set(ids)
        self.pending = [row for row in self.pending if row.spec.id not in gone]

    def drop_queued(self, ids: Iterable[str]) -> None:
        """Remove queued reminders by id."""
        gone = set(ids)
        self.queued = [row for row in self.queued if row.reminder.id not in gone]

    def decrement(self, ids: Iterable[str]) -> None:
        """Take one turn off the TTL of the named live reminders."""
        wanted = set(ids)
        self.pending = [
            row.model_copy(update={"ttl_remaining": row.ttl_remaining - 1})
            if row.spec.id in wanted and row.ttl_remaining is not None
            else row
            for row in self.pending
        ]


_SCRATCH_FIELDS = tuple(f.name for f in fields(Scratch) if not f.name.startswith("_"))
if _SCRATCH_FIELDS != STATE_FIELDS:  # pragma: no cover - a drift fails every import
    raise TypeError(f"Scratch fields {_SCRATCH_FIELDS} differ from SessionState's")


def _queued(s: Scratch, p: ev.Queued, _: ev.Event) -> None:
    s.queued.append(QueuedRow(reminder=p.reminder, mode=p.mode, position=p.position))
    s.see(p.reminder.id)


def _injected(s: Scratch, p: ev.Injected, _: ev.Event) -> None:
    s.drop_queued([p.reminder_id])
    s.pending.append(
        PendingRow(
            spec=p.reminder,
            ttl_remaining=p.ttl_turns,
            delivered=False,
            delivered_at_turn=None,
            audit_only=p.audit_only,
        )
    )
    s.see(p.reminder_id)


def _deduped(s: Scratch, p: ev.Deduped, _: ev.Event) -> None:
    s.drop_pending(p.replaced_ids)


def _revoked(s: Scratch, p: ev.Revoked, _: ev.Event) -> None:
    s.drop_queued([p.reminder_id])
    s.revoke(p.reminder_id)


def _fired(s: Scratch, p: ev.Fired, _: ev.Event) -> None:
    s.fire(p.reminder_id)
    s.pending = [
        row.model_copy(update={"delivered": True, "delivered_at_turn": p.turn_number})
        if row.spec.id == p.reminder_id
        else row
        for row in s.pending
    ]


def _delivered(s: Scratch, p: ev.Delivered, _: ev.Event) -> None:
    s.deliver(
        DeliveredEnvelope(
            turn_number=p.turn_number,
            speaker=p.speaker,
            directive_ids=p.directive_ids,
            text=p.text,
            format=p.format,
            nonce=p.nonce,
        )
    )
    # The newest envelopes are kept in full within FULL_ENVELOPE_TEXT_BYTES of stored text
    # (the newest always) and at most FULL_ENVELOPES_KEPT of them (§6.2, §4.1.1); older
    # rows are digests already (this rule made them so). The run at the end, summed as it
    # changes, loses its oldest row until it fits.
    run = s.kept_run()
    while len(s.delivered) - run.start > 1 and (
        len(s.delivered) - run.start > FULL_ENVELOPES_KEPT
        or run.text_bytes > FULL_ENVELOPE_TEXT_BYTES
    ):
        s.digest_delivered(run.start)
        run = s.kept_run()
    if s.nonce is None and p.nonce is not None:
        s.nonce = p.nonce


def _post_turn(s: Scratch, p: ev.PostTurn, _: ev.Event) -> None:
    s.decrement(p.decremented_ids)
    s.last_ended_turn = p.turn_number


def _expired(s: Scratch, p: ev.Expired, _: ev.Event) -> None:
    s.drop_pending([p.reminder_id])


def _dropped(s: Scratch, p: ev.Dropped, _: ev.Event) -> None:
    s.drop_pending([p.reminder_id])
    s.drop_queued([p.reminder_id])


def _compacted(s: Scratch, p: ev.Compacted, _: ev.Event) -> None:
    s.decrement(p.decremented_ids)
    if ttl_pass_due(s.last_ended_turn, p.turn_number):
        # Its pre-compact TTL pass counted as that turn's pass (SPEC §4.8 step 1).
        s.last_ended_turn = p.turn_number
    preserved = set(p.preserved_ids)
    s.pending = [
        row.model_copy(update={"delivered": False, "delivered_at_turn": None})
        if row.spec.id in preserved
        else row
        for row in s.pending
    ]
    s.clear_delivered()
    s.compactions += 1


def _handed_off(s: Scratch, p: ev.HandedOff, _: ev.Event) -> None:
    """The parent only records the handoff; the child side is the propagator's."""


def _inherited(s: Scratch, p: ev.Inherited, event: ev.Event) -> None:
    # The propagator decides with the `handed_off` event's id as command_id (see decide).
    if event.command_id not in s.inherited_from:
        s.inherited_from.append(event.command_id)


def _provider_evaluated(s: Scratch, p: ev.ProviderEvaluated, event: ev.Event) -> None:
    """Record the provider's latches exactly as the payload states them: a fired evaluation
    counts towards its once-latch and the per-turn byte budget (the body is the one its
    `injected` event, earlier in the same batch, made live); every evaluation records its
    `level` (a lower reading re-arms a threshold)."""
    providers = s.providers or ProvidersState()
    mark = providers.marks.get(p.provider_id) or ProviderMark()
    budget_turn, budget_bytes = providers.budget_turn, providers.budget_bytes
    if p.fired:
        mark = mark.model_copy(
            update={"fired_count": mark.fired_count + 1, "last_fired_turn": event.turn}
        )
        body = next((row.spec.body for row in s.pending if row.spec.id == p.reminder_id), "")
        # The reminder remembers its provider, for `provider_id` mutes (SPEC §12.2).
        s.pending = [
            row.model_copy(update={"provider_id": p.provider_id})
            if row.spec.id == p.reminder_id
            else row
            for row in s.pending
        ]
        if budget_turn != event.turn:
            budget_turn, budget_bytes = event.turn, 0
        budget_bytes += len(body.encode("utf-8"))
    mark = mark.model_copy(update={"level": p.level})
    s.providers = providers.model_copy(
        update={
            "marks": {**providers.marks, p.provider_id: mark},
            "evaluations": providers.evaluations + 1,
            "budget_turn": budget_turn,
            "budget_bytes": budget_bytes,
        }
    )


def _withheld(s: Scratch, p: ev.Withheld, _: ev.Event) -> None:
    """A record of what a render held back; the reminders stay as they are."""


def _muted(s: Scratch, p: ev.Muted, _: ev.Event) -> None:
    s.mutes.append(ActiveMute(mute_id=p.mute_id, selector=p.selector, until_turn=p.until_turn))


def _unmuted(s: Scratch, p: ev.Unmuted, _: ev.Event) -> None:
    s.mutes = [mute for mute in s.mutes if mute.mute_id != p.mute_id]


def _forged_directive_neutralized(
    s: Scratch, p: ev.ForgedDirectiveNeutralized, _: ev.Event
) -> None:
    """A record of a sanitize that escaped tags; the text was never stored."""


def _acknowledged(s: Scratch, p: ev.Acknowledged, _: ev.Event) -> None:
    """Remember the outcome; a `dismissed` one's removal is its own `expired` event."""
    s.acknowledge(p.reminder_id, p.outcome)


Handler = Callable[[Scratch, Any, ev.Event], None]

#: One handler per event kind; a unit test checks none is missing.
FOLD_HANDLERS: dict[str, Handler] = {
    "queued": _queued,
    "injected": _injected,
    "deduped": _deduped,
    "revoked": _revoked,
    "fired": _fired,
    "delivered": _delivered,
    "post_turn": _post_turn,
    "expired": _expired,
    "dropped": _dropped,
    "compacted": _compacted,
    "handed_off": _handed_off,
    "inherited": _inherited,
    "provider_evaluated": _provider_evaluated,
    "withheld": _withheld,
    "muted": _muted,
    "unmuted": _unmuted,
    "forged_directive_neutralized": _forged_directive_neutralized,
    "acknowledged": _acknowledged,
}


def apply_event(scratch: Scratch, event: ev.Event, stream_seq: int | None = None) -> None:
    """Fold one event into a scratch state in place."""
    apply_body(scratch, event)
    apply_link(scratch, event, stream_seq)


def apply_body(scratch: Scratch, event: ev.Event) -> None:
    """The part of `apply_event` that an event's kind, payload and header decide: all of it
    but its `chain`, `reply` and stream position. A decider's batch folds each draft so
    (`core.batch`), and `apply_link` with the linked event completes the fold."""
    FOLD_HANDLERS[event.kind](scratch, event.payload, event)
    scratch.session_id = event.session_id
    scratch.session_seq = event.session_seq
    scratch.turn = max(scratch.turn, event.turn)
    scratch.counters[event.kind] = scratch.counters.get(event.kind, 0) + 1
    scratch.last_occurred_at = event.occurred_at


def apply_link(scratch: Scratch, event: ev.Event, stream_seq: int | None = None) -> None:
    """The rest of `apply_event`: the chain head, the stream position, and the reply the
    session remembers for a repeated `request_id`. No fold handler reads `chain` or
    `reply`, so an event folded by `apply_body` as a draft and completed here with its
    final form is folded exactly as `apply_event` folds that final form."""
    scratch.chain_head = event.chain
    if stream_seq is not None:
        scratch.stream_seq = stream_seq
    if event.request_id is not None and event.reply is not None:
        row = RecentReply(request_id=event.request_id, reply=remembered_reply(event.reply))
        scratch.remember(row)


#: Stored size of each remembered reply row, by identity (rows are frozen and shared between
#: states), held only while the row lives.
_ROW_BYTES: MeasuredOnce[RecentReply] = MeasuredOnce(
    lambda row: json_bytes({"request_id": row.request_id, "reply": row.reply})
)


def _evict_replies(rows: list[RecentReply]) -> list[RecentReply]:
    """Keep the newest RECENT_REPLIES_KEPT rows within RECENT_REPLIES_BYTES (§4.1.1); the
    rows dropped, oldest first."""
    evicted = rows[:-RECENT_REPLIES_KEPT]
    del rows[:-RECENT_REPLIES_KEPT]
    sizes = _ROW_BYTES.many(rows)
    if sum(sizes) <= RECENT_REPLIES_BYTES:
        return evicted
    total, keep = 0, 0
    for size in reversed(sizes):
        total += size
        if total > RECENT_REPLIES_BYTES:
            break
        keep += 1
    evicted += rows[: len(rows) - keep]
    del rows[: len(rows) - keep]
    return evicted


def _index_replies(state: SessionState) -> dict[str, RecentReply]:
    """Request id → the first remembered row with it."""
    index: dict[str, RecentReply] = {}
    for row in state.recent_replies:
        index.setdefault(row.request_id, row)
    return index


#: Each state's index of its remembered replies, by identity, held while the state lives:
#: built on a state's first lookup (a scan of up to 256 rows spread through memory, the
#: longest part of deciding a command on a session that has lived) and carried by the fold
#: to the states that follow it, so a gateway's cached session scans once.
_REPLY_INDEX: KeptOnce[SessionState, dict[str, RecentReply]] = KeptOnce(_index_replies)


#: The sets of each state's `seen_ids` and `fired_ids` (None: not built), by identity, while
#: the state lives: handed from a state to the scratch thawed from it, which adds to them,
#: and on to the state it releases, so a session that lived long does not hash its whole
#: history on every command. Taken, not copied: a state thawed a second time (a command
#: decided again after a conflict) builds its sets again.
_ID_SETS: KeptOnce[SessionState, tuple[set[str] | None, set[str] | None]] = KeptOnce(
    lambda state: (None, None)
)

#: Each state's `Scratch.history_bytes`, by identity, held while the state lives: carried
#: by the fold to the states that follow, so a session that lived long is not measured
#: again on every command (the lists hold thousands of ids).
_HISTORY_BYTES: KeptOnce[SessionState, int] = KeptOnce(history_of)

#: Each state's `Scratch.kept_run`, by identity, held while the state lives: carried by the
#: fold to the states that follow, so a command does not sum the kept envelopes again.
_KEPT_RUNS: KeptOnce[SessionState, KeptRun] = KeptOnce(lambda state: KeptRun.of(state.delivered))


def remembered_row(state: SessionState, request_id: str) -> RecentReply | None:
    """The first remembered reply of `state` to `request_id` (SPEC §4.1), if any."""
    return _REPLY_INDEX(state).get(request_id)


def fold(state: SessionState, event: ev.Event, stream_seq: int | None = None) -> SessionState:
    """The state after `event`; `stream_seq` is the event's position in the stream, if known."""
    scratch = Scratch.thaw(state)
    apply_event(scratch, event, stream_seq)
    return scratch.release()


def fold_all(
    state: SessionState, events: Iterable[ev.Event | tuple[ev.Event, int | None]]
) -> SessionState:
    """Fold many events (optionally paired with their stream sequences) with one copy."""
    scratch = Scratch.thaw(state)
    for item in events:
        event, stream_seq = item if isinstance(item, tuple) else (item, None)
        apply_event(scratch, event, stream_seq)
    return scratch.release()
