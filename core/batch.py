"""Draft events of one command and what the command decided.

A decider emits draft events into a `Batch`, which folds each one into a scratch state so
later rules in the same command see earlier effects (a second drained reminder dedupes the
first). `Batch.finish` numbers the events, checks every size the command would store, attaches
the reply to the last event and links the hash chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts import commands as cmd
from contracts import events as ev
from contracts.replies import Reply
from contracts.state import SessionState
from contracts.trusted import trusted
from core import rules
from core.canonical import derived_uuid7, linked
from core.config import CommandContext, CoreConfig
from core.fold import Scratch, apply_body, apply_link, fold_all
from core.size import fits, json_bytes, replies_always_fit, state_upper_bound

#: `,"chain":"<64 hex>"` added to an event body after it is measured.
_CHAIN_BYTES = 76
#: What the stored state holds beyond the measured scratch: the chain head (64 hex; the
#: scratch is measured without one, since `finish` links the drafts after the check), the
#: projector's `stream_seq` (up to 16 digits; the scratch keeps the previous one), and 64
#: bytes for the KV record's framing.
_STATE_SLACK = 64 + 16 + 64


@dataclass(frozen=True)
class Decision:
    """What one command decided: events to append (maybe none) and the reply to send."""

    events: tuple[ev.Event, ...]
    reply: dict[str, Any]
    #: Each event's wire bytes (its canonical JSON, `chain` included), made with the chain.
    encoded: tuple[bytes, ...] = ()
    #: The first reply to this repeated `request_id` is no longer whole in the state (a
    #: render's envelope text, digested or compacted since): it is stored on the session's
    #: event at this `session_seq`, and only the log holds it. `reply` is the answer when
    #: the log has no such event. None: `reply` is the answer.
    reply_in_log: int | None = None
    #: The scratch the batch folded `events` into, chain and reply included (None when
    #: there are no events): `state_after` makes it the state, so whoever stores the events
    #: need not fold them a second time.
    folded: Scratch | None = field(default=None, compare=False, repr=False)

    def state_after(self, state: SessionState, stream_seq: int) -> SessionState:
        """The state after this decision's events on `state` (the state decided on), the
        last stored at `stream_seq`: what `fold_all` of the events gives."""
        if not self.events:
            return state
        if self.folded is None:  # a decision made without a batch (a test's): fold it
            *earlier, last = self.events
            return fold_all(state, [*((event, None) for event in earlier), (last, stream_seq)])
        # The batch is done with its scratch: the state takes over its lists (and the index
        # of its remembered replies) as `fold_all` hands over its own.
        self.folded.stream_seq = stream_seq
        return self.folded.release()

    @property
    def ok(self) -> bool:
        """Whether the command was accepted."""
        return bool(self.reply.get("ok"))


@dataclass
class Batch:
    """Draft events of one command, folded as they are emitted."""

    state: SessionState
    command: cmd.Command
    context: CommandContext
    turn: int
    command_id: str
    scratch: Scratch = field(init=False)
    drafts: list[ev.Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scratch = Scratch.thaw(self.state)

    def emit(self, payload: ev.AnyPayload) -> None:
        """Record one decided fact and let the scratch state see it."""
        kind = ev.KIND_OF[type(payload)]
        session_seq = self.state.session_seq + len(self.drafts) + 1
        draft = trusted(
            ev.Event,
            dict(
                schema_=ev.SCHEMA_V1,
                event_id=derived_uuid7(
                    self.context.occurred_at,
                    self.command_id,
                    self.command.session_id,
                    str(session_seq),
                ),
                kind=kind,
                session_id=self.command.session_id,
                agent_id=self.command.agent_id or self.command.session_id,
                task_id=self.command.task_id,
                session_seq=session_seq,
                turn=self.turn,
                occurred_at=self.context.occurred_at,
                command_id=self.command_id,
                request_id=self.command.request_id,
                payload=payload,
                reply=None,
                chain="",
            ),
        )
        self.drafts.append(draft)
        apply_body(self.scratch, draft)

    def _state_surely_fits(self, config: CoreConfig, remembered_bytes: int) -> bool:
        """Whether a bound from list lengths, the live reminders' and kept envelopes' sizes
        and the history's carried size (`Scratch.history_bytes`) shows the state after the
        command fits, so the exact measurement (a full serialisation) can be skipped. The
        directive ids are counted row by row: an id injected again after it expired is
        listed by each envelope that delivered it, yet seen once."""
        scratch = self.scratch
        kept = scratch.kept_run()
        bound = state_upper_bound(
            live_bytes=rules.session_bytes(scratch.pending, scratch.queued),
            rows=len(scratch.pending) + len(scratch.queued),
            delivered_text=kept.text_bytes,
            delivered_rows=len(scratch.delivered) - kept.start,
            delivered_ids=kept.directive_ids,
            replies=len(scratch.recent_replies),
            history_bytes=scratch.history_bytes(),
            inherited=len(scratch.inherited_from),
            mutes=len(scratch.mutes),
            acknowledged=len(scratch.acknowledged),
            provider_marks=0 if scratch.providers is None else len(scratch.providers.marks),
        )
        return bound + remembered_bytes + _STATE_SLACK <= config.max_payload_bytes

    def _check_state_fits(self, wire: dict[str, Any], config: CoreConfig) -> None:
        """The state after the command, with the reply it will remember, fits (§4.1.1)."""
        remembered_bytes = 0
        if self.command.request_id is not None:  # the reply the state will remember
            # As the fold stores the row in `recent_replies`, with the comma before it.
            row = {"request_id": self.command.request_id, "reply": rules.remembered_reply(wire)}
            remembered_bytes = json_bytes(row) + 1
        if not self._state_surely_fits(config, remembered_bytes):
            # The state as the projector will store it, stream_seq at its longest.
            state = self.scratch.freeze()
            # Until `finish` links the drafts, the scratch holds the chain head from before
            # the command (ASCII hex, or empty for a new session): the slack counts the new.
            measured = len(state.model_dump_json().encode()) - len(state.chain_head)
            state_bytes = measured + _STATE_SLACK
            fits("state", state_bytes + remembered_bytes, config.max_payload_bytes)

    def finish(
        self, reply: Reply, config: CoreConfig
    ) -> tuple[tuple[ev.Event, ...], dict[str, Any], tuple[bytes, ...]]:
        """Final events (reply on the last, chain linked), the reply's wire form and each
        event's wire bytes.

        Raises `too_large` when an event, the reply or the state after the command would
        not fit in `max_payload_bytes` (SPEC §4.1.1): nothing is emitted then."""
        last_seq = self.state.session_seq + len(self.drafts)
        wire = reply.to_wire()
        wire["session_seq"] = last_seq  # the reply was built before the events were numbered
        limit = config.max_payload_bytes
        if not replies_always_fit(config):
            fits("reply", json_bytes(wire), limit)
        if self.drafts:
            self._check_state_fits(wire, config)
        previous = self.state.chain_head
        final: list[ev.Event] = []
        encoded: list[bytes] = []
        for index, draft in enumerate(self.drafts):
            is_last = index == len(self.drafts) - 1
            body = draft.model_dump(mode="json", by_alias=True, exclude={"chain"})
            if is_last:
                body["reply"] = wire
            # One canonical form serves the size check, the chain link and the wire bytes.
            text, previous, data = linked(previous, body, float_free=True)
            fits(f"{draft.kind} event", len(text) + _CHAIN_BYTES, limit)
            encoded.append(data)
            # The draft's parts were validated when built; only reply and chain are new.
            values = {**draft.__dict__, "chain": previous, "reply": wire if is_last else None}
            event = trusted(ev.Event, values)
            apply_link(self.scratch, event)
            final.append(event)
        return tuple(final), wire, tuple(encoded)
