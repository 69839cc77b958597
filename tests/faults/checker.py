"""The history checker: could a recorded history and the log have happened in one legal order?

Pure: it reads a history (`Op`s, see `tests.faults.history`) and each session's stored events
(envelopes with their `stream_seq`, in stream order) and returns the anomalies, each named
precisely and with the first operations involved:

- **lost**: an acked command has no event in the log (or its reply names a `session_seq`
  that is not its last event's).
- **duplicated**: one `request_id` was decided twice (two `command_id`s), or an event id is
  in the log twice.
- **partial**: a command's events are not one contiguous run ending with its reply, or
  miss the event its kind must append, or the session's `session_seq` has a gap.
- **phantom**: a command answered with a definite error left events.
- **reordered**: a command acknowledged before another was invoked comes after it in the
  session's log.
- **stale read**: a `state` query answered `stale: false` without a write acknowledged before
  it was invoked (or its `min_seq`); or a command that appended nothing (a `render` with no
  envelope, an `end_turn` already applied, …) decided on a state missing such a write.
- **seq went backwards**: a client saw a session's `session_seq` go down.
- **time went backwards**: a session's recorded `occurred_at` went down in log order.

Nothing here touches NATS; `tests/unit/test_history_checker.py` feeds it hand-made histories.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Error codes after which a command may or may not have been applied.
INDETERMINATE_CODES = frozenset({"unavailable", "timeout", "no_answer", "connection_lost"})

#: Commands that change the log (queries are the rest).
WRITES = frozenset({"inject", "clear", "revoke", "render", "end_turn", "checkpoint", "handoff"})


@dataclass
class Op:
    """One operation of the history: invoked at `invoked`, completed at `completed`.

    `status` is `ok`, `fail` (a definite error: nothing was applied) or `info` (the outcome
    is unknown: a timeout, `unavailable`, a lost connection); `completed` is None while the
    operation is still open (counted as `info`)."""

    op_id: int
    client: str
    op: str
    session_id: str
    request_id: str | None
    invoked: float
    payload: dict[str, Any] = field(default_factory=dict)
    completed: float | None = None
    status: str = "info"
    reply: dict[str, Any] = field(default_factory=dict)

    def brief(self) -> str:
        """One line naming the operation, for an anomaly's message."""
        code = (self.reply.get("error") or {}).get("code") if self.reply else None
        done = "open" if self.completed is None else f"{self.completed:.3f}"
        seq = self.reply.get("session_seq") if self.reply else None
        return (
            f"#{self.op_id} {self.client} {self.op} {self.session_id} rid={self.request_id} "
            f"[{self.invoked:.3f}..{done}] {self.status}"
            + (f" {code}" if code else "")
            + (f" seq={seq}" if seq is not None else "")
        )


@dataclass(frozen=True)
class Anomaly:
    """One thing the history and the log cannot both be, with the operations involved."""

    kind: str
    session_id: str
    message: str
    ops: tuple[str, ...] = ()

    def __str__(self) -> str:
        involved = "".join(f"\n    {op}" for op in self.ops[:4])
        return f"{self.kind} [{self.session_id}] {self.message}{involved}"


@dataclass(frozen=True)
class Event:
    """What the checker needs of one stored event."""

    stream_seq: int
    session_seq: int
    kind: str
    command_id: str
    request_id: str | None
    occurred_at: str
    event_id: str
    reply: Mapping[str, Any] | None

    @classmethod
    def of(cls, envelope: Mapping[str, Any], stream_seq: int) -> Event:
        """From a stored envelope (as exported, or as `StoredEvent.envelope`)."""
        return cls(
            stream_seq=stream_seq,
            session_seq=int(envelope["session_seq"]),
            kind=str(envelope["kind"]),
            command_id=str(envelope["command_id"]),
            request_id=envelope.get("request_id"),
            occurred_at=str(envelope["occurred_at"]),
            event_id=str(envelope["event_id"]),
            reply=envelope.get("reply"),
        )


@dataclass
class Report:
    """Everything the checker found, with the counts a run prints."""

    anomalies: list[Anomaly] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def add(self, kind: str, session_id: str, message: str, *ops: Op) -> None:
        """Record one anomaly."""
        self.anomalies.append(Anomaly(kind, session_id, message, tuple(op.brief() for op in ops)))

    def by_kind(self) -> dict[str, int]:
        """Anomalies per kind."""
        return dict(Counter(a.kind for a in self.anomalies))

    def summary(self, limit: int = 10) -> str:
        """The counts and the first anomalies, for a failing assertion."""
        lines = [f"{len(self.anomalies)} anomalies {self.by_kind()}; counts {dict(self.counts)}"]
        lines += [str(a) for a in self.anomalies[:limit]]
        return "\n".join(lines)


def appended(op: Op) -> bool:
    """Whether an acked write's reply says it appended events (some replies say it did not)."""
    reply = op.reply
    if op.op == "clear":
        return int(reply.get("removed_count", 0)) > 0
    if op.op == "revoke":
        return reply.get("status") == "revoked"
    if op.op == "render":
        return reply.get("envelope") is not None
    if op.op == "end_turn":
        return not reply.get("already_applied", False)
    if op.op == "checkpoint":
        return bool(reply.get("drained"))
    return op.op in WRITES


def _defining_kinds(op: Op) -> Counter[str]:
    """The events an applied command of this kind must contain (at least these many)."""
    reply = op.reply if op.status == "ok" else {}
    if op.op == "inject":
        return Counter({"queued" if op.payload.get("mode") else "injected": 1})
    if op.op == "render":
        return Counter({"delivered": 1})
    if op.op == "end_turn":
        return Counter({"post_turn": 1})
    if op.op == "handoff":
        return Counter({"handed_off": 1})
    if op.op == "revoke":
        return Counter({"revoked": 1})
    if op.op == "clear":
        return Counter({"expired": int(reply.get("removed_count", 1))})
    if op.op == "checkpoint":
        return Counter({"injected": len(reply.get("drained") or [None])})
    return Counter()


def _runs(events: Sequence[Event]) -> dict[str, list[list[Event]]]:
    """Each command_id's maximal runs of consecutive events."""
    runs: dict[str, list[list[Event]]] = defaultdict(list)
    previous: str | None = None
    for event in events:
        if event.command_id == previous:
            runs[event.command_id][-1].append(event)
        else:
            runs[event.command_id].append([event])
        previous = event.command_id
    return runs


def _check_log_shape(session_id: str, events: Sequence[Event], report: Report) -> None:
    seqs = [e.session_seq for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        first = next(i for i, s in enumerate(seqs, start=1) if s != i)
        report.add(
            "partial", session_id, f"session_seq not contiguous at position {first}: {seqs[:8]}…"
        )
    for event_id, n in Counter(e.event_id for e in events).items():
        if n > 1:
            report.add("duplicated", session_id, f"event {event_id} is in the log {n} times")
    for command_id, runs in _runs(events).items():
        if len(runs) > 1:
            where = [run[0].session_seq for run in runs]
            report.add("partial", session_id, f"command {command_id} is split into runs at {where}")
    for a, b in itertools.pairwise(events):
        if b.occurred_at < a.occurred_at:
            report.add(
                "time went backwards",
                session_id,
                f"session_seq {b.session_seq} at {b.occurred_at} after "
                f"session_seq {a.session_seq} at {a.occurred_at}",
            )
            break


def _check_writes(
    session_id: str, ops: Sequence[Op], events: Sequence[Event], report: Report
) -> dict[int, int]:
    """Per applied op: the stream_seq of its first event (for the order check)."""
    by_request: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.request_id is not None:
            by_request[event.request_id].append(event)
    first_of: dict[int, int] = {}
    for op in ops:
        if op.op not in WRITES or op.request_id is None:
            continue
        mine = by_request.get(op.request_id, [])
        commands = {e.command_id for e in mine}
        if len(commands) > 1:
            report.add(
                "duplicated", session_id, f"request {op.request_id} decided {len(commands)}×", op
            )
        if op.status == "fail":
            if mine:
                report.add("phantom", session_id, f"failed but left {len(mine)} event(s)", op)
            continue
        if op.status == "ok" and not appended(op):
            continue
        if not mine:
            if op.status == "ok":
                report.add("lost", session_id, "acked but none of its events is in the log", op)
            continue
        report.counts["applied"] += 1
        first_of[op.op_id] = mine[0].stream_seq
        run = [e for e in mine if e.command_id == mine[0].command_id]
        seqs = [e.session_seq for e in run]
        missing = _defining_kinds(op) - Counter(e.kind for e in run)
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))) or run[-1].reply is None or missing:
            report.add(
                "partial",
                session_id,
                f"events at session_seq {seqs} ({[e.kind for e in run]}) are not one whole "
                f"command{f': missing {dict(missing)}' if missing else ''}",
                op,
            )
        elif op.status == "ok" and op.reply.get("session_seq") != seqs[-1]:
            report.add(
                "lost",
                session_id,
                f"acked session_seq {op.reply.get('session_seq')} but its events end at {seqs[-1]}",
                op,
            )
    return first_of


def _check_real_time(
    session_id: str, ops: Sequence[Op], first_of: Mapping[int, int], report: Report
) -> None:
    """An op acked before another was invoked must come first in the log."""
    in_log = sorted((first_of[op.op_id], op) for op in ops if op.op_id in first_of)
    latest: Op | None = None  # the op earlier in the log that was invoked last
    for _, op in in_log:
        if (
            latest is not None
            and op.status == "ok"
            and op.completed is not None
            and op.completed < latest.invoked
        ):
            report.add(
                "reordered",
                session_id,
                "acked before the other was invoked, yet after it in the log",
                op,
                latest,
            )
            return
        if latest is None or op.invoked > latest.invoked:
            latest = op


def _check_reads(session_id: str, ops: Sequence[Op], report: Report) -> None:
    """`state` sees every write acked before it was invoked; clients never see seq go down."""
    acked = sorted(
        (op.completed, int(op.reply["session_seq"]), op)
        for op in ops
        if op.op in WRITES
        and op.status == "ok"
        and op.completed is not None
        and "session_seq" in op.reply
    )
    for op in ops:
        if op.status != "ok":
            continue
        if op.op in WRITES and not appended(op):
            # A command that appended nothing decided on the state it read: that is a read.
            _check_read(session_id, op, int(op.reply.get("session_seq") or 0), acked, report)
            continue
        if op.op != "state":
            continue
        state = op.reply.get("state") or {}
        seen = int(state.get("session_seq", 0))
        if op.reply.get("stale"):
            report.counts["stale_flagged"] += 1
            continue
        _check_read(session_id, op, seen, acked, report)
    by_client: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.status == "ok" and op.completed is not None:
            by_client[op.client].append(op)
    for client_ops in by_client.values():
        high: tuple[int, Op] | None = None
        for op in sorted(client_ops, key=lambda o: o.invoked):
            seen_seq = _seen_seq(op)
            if seen_seq is None:
                continue
            seq = seen_seq
            if high is not None and seq < high[0] and op.invoked > (high[1].completed or 0):
                report.add(
                    "seq went backwards",
                    session_id,
                    f"client saw session_seq {high[0]} then {seq}",
                    high[1],
                    op,
                )
                break
            if high is None or seq > high[0]:
                high = (seq, op)


def _check_read(
    session_id: str, op: Op, seen: int, acked: Sequence[tuple[float, int, Op]], report: Report
) -> None:
    """A read (or a decision that appended nothing) saw every write acked before it began."""
    need, witness = int(op.payload.get("min_seq") or 0), None
    for completed, seq, write in acked:
        if completed >= op.invoked:
            break
        if seq > need:
            need, witness = seq, write
    if seen < need:
        what = "saw" if op.op == "state" else f"{op.op} appended nothing, decided on"
        involved = [op] + ([witness] if witness else [])
        report.add(
            "stale read", session_id, f"{what} session_seq {seen}, needed ≥ {need}", *involved
        )


def _seen_seq(op: Op) -> int | None:
    if op.op == "state":
        if op.reply.get("stale"):
            return None
        return int((op.reply.get("state") or {}).get("session_seq", 0))
    seq = op.reply.get("session_seq")
    return int(seq) if isinstance(seq, int) else None


def check(ops: Iterable[Op], logs: Mapping[str, Sequence[Event]]) -> Report:
    """Every check, per session; `logs` maps a session id to its events in stream order."""
    report = Report()
    by_session: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_session[op.session_id].append(op)
        report.counts[f"{op.status}"] += 1
    for session_id in sorted(set(by_session) | set(logs)):
        events = sorted(logs.get(session_id, []), key=lambda e: e.stream_seq)
        session_ops = sorted(by_session.get(session_id, []), key=lambda o: o.invoked)
        report.counts["events"] += len(events)
        _check_log_shape(session_id, events, report)
        first_of = _check_writes(session_id, session_ops, events, report)
        _check_real_time(session_id, session_ops, first_of, report)
        _check_reads(session_id, session_ops, report)
    return report


# --------------------------------------------------------------------------- files


def read_history(path: Path) -> list[Op]:
    """The ops of a JSON Lines history (`invoke` lines, then their completions)."""
    ops: dict[int, Op] = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if row["type"] == "invoke":
                ops[row["op_id"]] = Op(
                    op_id=row["op_id"],
                    client=row["client"],
                    op=row["op"],
                    session_id=row["session_id"],
                    request_id=row.get("request_id"),
                    invoked=row["t"],
                    payload=row.get("payload") or {},
                )
            else:
                op = ops[row["op_id"]]
                op.status, op.completed, op.reply = row["type"], row["t"], row.get("reply") or {}
    return list(ops.values())


def read_export(path: Path) -> dict[str, list[Event]]:
    """Events per session from a `reminders export --all` file."""
    logs: dict[str, list[Event]] = defaultdict(list)
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            logs[row["session_id"]].append(Event.of(row, int(row["stream_seq"])))
    return dict(logs)


def main(argv: Sequence[str]) -> int:
    """`python -m tests.faults.checker HISTORY.jsonl EXPORT.jsonl`: check a run offline."""
    report = check(read_history(Path(argv[0])), read_export(Path(argv[1])))
    print(report.summary(limit=50))
    return 1 if report.anomalies else 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
