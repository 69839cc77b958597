"""Deterministic drivers for the pure core, shared by unit, property and golden tests."""

from __future__ import annotations

from typing import Any

from contracts.events import Event
from contracts.state import SessionState
from contracts.stored import StoredEvent
from contracts.subjects import event_subject
from core import CommandContext, CoreConfig, Decision, fold_all, handle


def context_for(n: int, nonce: str | None = None) -> CommandContext:
    """The n-th command's context: fixed ids and a clock that ticks 1 ms per command."""
    seconds, millis = divmod(n, 1000)
    minutes, seconds = divmod(seconds, 60)
    return CommandContext(
        command_id=f"cmd-{n:05d}",
        occurred_at=f"2026-11-29T15:{minutes % 60:02d}:{seconds:02d}.{millis:03d}Z",
        new_reminder_id=f"r-{n:05d}",
        nonce=nonce,
    )


class Driver:
    """One session driven through `handle`, folding every decision like the projector."""

    def __init__(self, session_id: str = "s1", config: CoreConfig | None = None) -> None:
        self.session_id = session_id
        self.config = config or CoreConfig()
        self.state = SessionState()
        self.log: list[Event] = []
        self.count = 0

    def run(self, op: str, **fields: Any) -> Decision:
        """Decide `op` with these fields (session_id added) and fold the events."""
        return self.run_raw(op, {"session_id": self.session_id, **fields})

    def run_raw(self, op: str, raw: object) -> Decision:
        """Decide a raw JSON value as `op` and fold the events."""
        self.count += 1
        decision = handle(self.state, op, raw, context_for(self.count, "n0nce"), self.config)
        self.state = fold_all(self.state, decision.events)
        self.log.extend(decision.events)
        return decision

    def ok(self, op: str, **fields: Any) -> dict[str, Any]:
        """Run and assert the command was accepted; returns the reply."""
        decision = self.run(op, **fields)
        assert decision.ok, decision.reply
        return decision.reply

    def error(self, op: str, **fields: Any) -> str:
        """Run and assert the command was rejected with no events; returns the code."""
        before = self.state
        decision = self.run(op, **fields)
        assert not decision.ok, decision.reply
        assert decision.events == ()
        assert self.state == before
        return str(decision.reply["error"]["code"])

    def inject(self, body: str = "a reminder", mode: str | None = None, **spec: Any) -> str:
        """Inject a reminder; returns its id."""
        fields: dict[str, Any] = {"reminder": {"body": body, **spec}}
        if mode is not None:
            fields["mode"] = mode
        return str(self.ok("inject", **fields)["reminder_id"])

    def kinds(self, decision: Decision) -> list[str]:
        """The kinds a decision appended, in order."""
        return [event.kind for event in decision.events]

    def pending_ids(self) -> list[str]:
        """Live reminder ids in injection order."""
        return [row.spec.id or "" for row in self.state.pending]

    def queued_ids(self) -> list[str]:
        """Queued reminder ids in FIFO order."""
        return [row.reminder.id or "" for row in self.state.queued]


def json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key/index path inside a JSON value (for tampering with any nested field)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += json_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += json_paths(child, (*prefix, index))
    return found


def session_log(session_id: str = "s1") -> list[Event]:
    """Five events: two injected, two fired, one delivered."""
    driver = Driver(session_id)
    driver.inject("a", ttl_turns=2)
    driver.inject("b")
    driver.ok("render", turn=0)
    return driver.log


def stored(events: list[Event], first_seq: int = 1) -> list[StoredEvent]:
    """The events as the stream stores them, from `first_seq` on."""
    return [
        StoredEvent(e.to_wire(), first_seq + i, event_subject(e.kind, e.session_id))
        for i, e in enumerate(events)
    ]
