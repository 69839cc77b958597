"""The least work an inject with a dedupe key needs in Python, without the core's models.

`bench.null_gateway --lean` decides each command with `LeanSessions.decide` instead of the
core (and `bench.lean_gateway`, the gateway itself, with `LeanSessions.decide_command`): the
request validated exactly as the gateway validates it (`parse_command`, pydantic), then the
same events the core writes (`deduped` when the key replaces a live reminder, then
`injected` with the reply), built as plain dicts, each id derived and each link chained by the
core's own functions (`derived_uuid7`, `linked`), and a state of a few fields per session: its
`session_seq`, chain head and live reminder per dedupe key. No pydantic model is built or
dumped after the request's, and no other rule runs (budgets, bounds, turns, queues, redaction).

It is a measurement, not a gateway: it knows one kind of command. A unit test holds its bytes
equal to the core's for the same commands and context, so what it costs is the cost of the
same output made with nothing but the work the output itself needs. `bench.gateway_floor` sets
it beside the null gateway and the core: the share of the null gateway's rate it keeps is what
a core rewritten without models could keep at best in this language.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts import commands as cmd
from contracts import events as ev
from contracts.state import SessionState
from core.canonical import derived_uuid7, linked
from core.config import CommandContext


@dataclass
class LeanSession:
    """What the lean path keeps of one session."""

    session_seq: int = 0
    chain_head: str = ""
    #: The highest turn seen: an inject carries none and takes the session's.
    turn: int = 0
    #: The live reminder's id for each dedupe key.
    live_by_key: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LeanEvent:
    """What the gateway's append reads of an event besides its bytes: the subject's parts
    and the message id."""

    kind: str
    session_id: str
    event_id: str


@dataclass(frozen=True)
class LeanDecision:
    """A lean inject's decision, in the shape the gateway reads of `core.Decision`: the
    events (kind, session and id), their wire bytes and the reply. `state_after` keeps the lean
    session and hands the gateway back the state it decided on unchanged, so the gateway's
    cache holds the empty state a new session loads as."""

    events: tuple[LeanEvent, ...]
    reply: dict[str, Any]
    encoded: tuple[bytes, ...]
    sessions: LeanSessions
    session: LeanSession
    #: The core's field for a repeated request's reply held only by the log: never here.
    reply_in_log: None = None

    def keep(self) -> None:
        """The session's lean state after this decision, kept for the next command."""
        self.sessions.sessions[self.events[-1].session_id] = self.session

    def state_after(self, state: SessionState, stream_seq: int) -> SessionState:
        """Keep the lean session (the events are stored) and return `state` as it was."""
        self.keep()
        return state


@dataclass
class LeanSessions:
    """Every session's lean state, in memory."""

    sessions: dict[str, LeanSession] = field(default_factory=dict)

    def decided(self, op: str, raw: object, context: CommandContext) -> LeanDecision:
        """One inject validated from its request, decided and kept."""
        command, _ = cmd.parse_command(op, raw)
        decision = self.decide_command(command, context)
        decision.keep()
        return decision

    def decide(self, op: str, raw: object, context: CommandContext) -> tuple[str, list[bytes]]:
        """One inject decided and kept: the kind of its last event and every event's wire
        bytes."""
        decision = self.decided(op, raw, context)
        return decision.events[-1].kind, list(decision.encoded)

    def decide_command(self, command: cmd.Command, context: CommandContext) -> LeanDecision:
        """One validated inject decided on a copy of its session's lean state, which the
        decision keeps only when told (`LeanDecision.keep`), as the core's state is kept
        only after its events are stored."""
        if not isinstance(command, cmd.Inject) or command.mode is not None:
            raise ValueError("the lean path decides only an inject straight into pending")
        spec = command.reminder
        kept = self.sessions.get(command.session_id) or LeanSession()
        # A copy made field by field, which costs less than `dataclasses.replace`.
        session = LeanSession(kept.session_seq, kept.chain_head, kept.turn, dict(kept.live_by_key))
        reminder_id = spec.id or context.new_reminder_id
        reminder = {
            "authority": spec.authority,
            "body": spec.body,
            "dedupe_key": spec.dedupe_key,
            "fired_at_turn": session.turn if spec.fired_at_turn is None else spec.fired_at_turn,
            "id": reminder_id,
            "originating_agent_id": spec.originating_agent_id,
            "preserve_on_compact": spec.preserve_on_compact,
            "propagate": spec.propagate,
            "role_hint": spec.role_hint,
            "source": spec.source,
            "tags": list(spec.tags),
            "ttl_turns": spec.ttl_turns,
        }
        payloads: list[tuple[str, dict[str, Any]]] = []
        replaced = session.live_by_key.get(spec.dedupe_key) if spec.dedupe_key else None
        if replaced is not None:
            payloads.append(("deduped", _deduped(reminder_id, replaced, spec.dedupe_key)))
        payloads.append(("injected", _injected(reminder)))
        reply = {
            "deduped_count": 1 if replaced else 0,
            "ok": True,
            "reminder_id": reminder_id,
            "session_seq": session.session_seq + len(payloads),
        }
        # The reply rides on the last event only.
        replies = [None] * (len(payloads) - 1) + [reply]
        linked_events = [
            self._linked(session, command, context, kind, payload, answer)
            for (kind, payload), answer in zip(payloads, replies, strict=True)
        ]
        if spec.dedupe_key is not None:
            session.live_by_key[spec.dedupe_key] = reminder_id
        return LeanDecision(
            events=tuple(
                LeanEvent(kind, command.session_id, event_id)
                for (kind, _), (event_id, _) in zip(payloads, linked_events, strict=True)
            ),
            reply=reply,
            encoded=tuple(data for _, data in linked_events),
            sessions=self,
            session=session,
        )

    @staticmethod
    def _linked(
        session: LeanSession,
        command: cmd.Inject,
        context: CommandContext,
        kind: str,
        payload: dict[str, Any],
        reply: dict[str, Any] | None,
    ) -> tuple[str, bytes]:
        """One event's id and wire bytes, linked after the session's chain head, which moves
        on."""
        session.session_seq += 1
        seq = session.session_seq
        event_id = derived_uuid7(
            context.occurred_at, context.command_id, command.session_id, str(seq)
        )
        body = {
            "agent_id": command.agent_id or command.session_id,
            "command_id": context.command_id,
            "event_id": event_id,
            "kind": kind,
            "occurred_at": context.occurred_at,
            "payload": payload,
            "reply": reply,
            "request_id": command.request_id,
            "schema": ev.SCHEMA_V1,
            "session_id": command.session_id,
            "session_seq": seq,
            "task_id": command.task_id,
            "turn": session.turn,
        }
        _, session.chain_head, data = linked(session.chain_head, body, float_free=True)
        return event_id, data


def _deduped(reminder_id: str, replaced: str, dedupe_key: str | None) -> dict[str, Any]:
    """A `deduped` payload: the newcomer replaces one live reminder at inject."""
    return {
        "boundary": "inject",
        "dedupe_key": dedupe_key,
        "dropped_count": 1,
        "dropped_reminder_ids": [replaced],
        "reminder_id": reminder_id,
        "replaced_id": replaced,
        "replaced_ids": [replaced],
        "replacing_id": reminder_id,
    }


def _injected(reminder: dict[str, Any]) -> dict[str, Any]:
    """An `injected` payload of a reminder that goes live at once."""
    return {
        "audit_only": False,
        "authority": reminder["authority"],
        "dedupe_key": reminder["dedupe_key"],
        "originating_agent_id": reminder["originating_agent_id"],
        "propagate": reminder["propagate"],
        "reminder": reminder,
        "reminder_id": reminder["id"],
        "role_hint": reminder["role_hint"],
        "source": reminder["source"],
        "tags": reminder["tags"],
        "ttl_turns": reminder["ttl_turns"],
    }
