"""Realistic interleaved traffic: many sessions decided by the pure core, appended in time order.

Each session is a script of commands cycling `inject` (always with the same dedupe key, so every
inject after the first is `deduped` + `injected`), `render` and `end_turn`, decided by
`core.decide` and folded by `core.fold` exactly as the gateway does, with derived ids and a fake
clock. The events are then appended with raw nats-py atomic batches (`publish_atomic`, up to
1000 messages each, OCC expectations chained from the returned stream sequences) in round-robin
order across sessions, so a session's events are spread through the whole stream as live traffic
spreads them, not stored in one block.

Deciding is the slow part (the core hashes every event into the chain), so sessions are decided
in worker processes; the appends stay in one process, in order.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import nats
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from contracts import commands as cmd
from contracts.events import Event
from contracts.session_index import EMPTY_INDEX, SessionIndex
from contracts.state import SessionState
from core import CommandContext, decide, fold
from core.canonical import derived_uuid7
from services.adapters.append import SessionAppend, encode_event, publish_atomic

#: The fake clock's origin; one millisecond per command slot in the interleaved order.
EPOCH = datetime(2026, 11, 29, 15, 0, 0, tzinfo=UTC)
#: The session whose replay is timed inside the big stream (bench.catch_up).
LONG_SESSION = "bench-long"
#: Largest atomic batch the fill sends (the server's default batch limit is 1000 messages).
MAX_BATCH = 1000

#: One command of a session's script: op and its fields, cycling by position.
_SCRIPT: tuple[str, ...] = ("inject", "render", "end_turn")


@dataclass(frozen=True)
class Traffic:
    """Every session's decided commands: `commands[i][k]` is the events of session i's k-th."""

    session_ids: tuple[str, ...]
    commands: tuple[tuple[tuple[Event, ...], ...], ...]

    @property
    def events(self) -> int:
        """How many events the traffic appends."""
        return sum(len(events) for session in self.commands for events in session)

    def session_events(self, session_id: str) -> tuple[Event, ...]:
        """One session's events in order."""
        index = self.session_ids.index(session_id)
        return tuple(event for events in self.commands[index] for event in events)

    def mean_event_bytes(self, sample: int = 2000) -> int:
        """Mean wire size of an event, over the first `sample` events of the first sessions."""
        sizes: list[int] = []
        for session in self.commands:
            for events in session:
                sizes.extend(len(encode_event(event)) for event in events)
            if len(sizes) >= sample:
                break
        return round(sum(sizes) / len(sizes)) if sizes else 0


def timestamp(millis: int) -> str:
    """The fake clock's `occurred_at` for a slot, in the core's millisecond format."""
    moment = EPOCH + timedelta(milliseconds=millis)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def fake_context(session_id: str, position: int, millis: int) -> CommandContext:
    """The context of a session's `position`-th command at fake-clock slot `millis`: its ids
    derive from the three, so a rerun decides the same events."""
    occurred_at = timestamp(millis)
    return CommandContext(
        command_id=derived_uuid7(occurred_at, "command", session_id, str(position)),
        occurred_at=occurred_at,
        new_reminder_id=derived_uuid7(occurred_at, "reminder", session_id, str(position)),
    )


def command_fields(position: int) -> tuple[str, dict[str, object]]:
    """The position-th command of every session's script."""
    op = _SCRIPT[position % len(_SCRIPT)]
    turn = position // len(_SCRIPT)
    if op == "inject":
        # The same dedupe key each time: the live one is replaced (`deduped` + `injected`).
        reminder = {"body": f"turn {turn}: keep the tests green", "ttl_turns": 3}
        return op, {"reminder": {**reminder, "dedupe_key": "status"}}
    return op, {"turn": turn}


def inject_payload(session_id: str, n: int) -> dict[str, object]:
    """The n-th inject of a session: same dedupe key each time, so `deduped` + `injected`."""
    return {
        "session_id": session_id,
        "reminder": {"body": f"note {n}: keep the tests green", "ttl_turns": 3, "dedupe_key": "k"},
    }


def decide_session(session_id: str, times: Sequence[int]) -> tuple[tuple[Event, ...], ...]:
    """One session's script of `len(times)` commands, decided and folded by the core, the k-th
    at fake-clock slot `times[k]`. Raises if the core refuses one (the script is wrong)."""
    state = SessionState()
    decided: list[tuple[Event, ...]] = []
    for position, millis in enumerate(times):
        op, fields = command_fields(position)
        command, _ = cmd.parse_command(op, {"session_id": session_id, **fields})
        decision = decide(state, command, fake_context(session_id, position, millis))
        if not decision.events:
            raise RuntimeError(f"{op} #{position} of {session_id} decided nothing")
        for event in decision.events:
            state = fold(state, event)
        decided.append(tuple(decision.events))
    return tuple(decided)


@dataclass(frozen=True)
class Plan:
    """Sizes of one stream: `sessions` ordinary sessions with `commands_per_session` commands
    on average (a fraction spreads: some sessions get one more), and optionally one long
    session of `long_commands` commands spread evenly through the stream."""

    sessions: int
    commands_per_session: float
    long_commands: int = 0
    prefix: str = "bench"

    def commands_of(self, index: int) -> int:
        """How many commands ordinary session `index` runs."""
        whole = math.floor(self.commands_per_session)
        extra = self.commands_per_session - whole
        # Spread the extra commands evenly over the sessions, deterministically.
        return whole + (1 if math.floor((index + 1) * extra) > math.floor(index * extra) else 0)

    @property
    def rounds(self) -> int:
        """Round-robin rounds: the longest ordinary script."""
        return math.ceil(self.commands_per_session)

    def time_of(self, index: int, position: int) -> int:
        """Fake-clock slot of ordinary session `index`'s command `position` (round-robin)."""
        return position * self.sessions + index

    def long_times(self) -> list[int]:
        """Fake-clock slots of the long session's commands, spread over the whole run."""
        span = max(1, self.rounds * self.sessions)
        return [k * span // max(1, self.long_commands) for k in range(self.long_commands)]


def _decide_chunk(job: tuple[Plan, int, int]) -> list[tuple[tuple[Event, ...], ...]]:
    plan, start, stop = job
    return [
        decide_session(
            f"{plan.prefix}-{index}",
            [plan.time_of(index, k) for k in range(plan.commands_of(index))],
        )
        for index in range(start, stop)
    ]


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    )


def generate(plan: Plan, workers: int | None = None, chunk: int = 500) -> Traffic:
    """Decide every session of `plan` with the core (in `workers` processes), with a progress
    bar on stderr."""
    jobs = [
        (plan, start, min(plan.sessions, start + chunk)) for start in range(0, plan.sessions, chunk)
    ]
    decided: list[tuple[tuple[Event, ...], ...]] = []
    workers = workers or os.cpu_count() or 1
    with _progress() as progress:
        task = progress.add_task("deciding sessions", total=plan.sessions)
        if workers > 1 and len(jobs) > 1:
            context = multiprocessing.get_context("fork")
            with context.Pool(workers) as pool:
                for part in pool.imap(_decide_chunk, jobs):
                    decided.extend(part)
                    progress.advance(task, len(part))
        else:
            for job in jobs:
                part = _decide_chunk(job)
                decided.extend(part)
                progress.advance(task, len(part))
    session_ids = [f"{plan.prefix}-{index}" for index in range(plan.sessions)]
    if plan.long_commands:
        decided.append(decide_session(LONG_SESSION, plan.long_times()))
        session_ids.append(LONG_SESSION)
    return Traffic(tuple(session_ids), tuple(decided))


def interleaved(traffic: Traffic, plan: Plan) -> Iterator[tuple[int, tuple[Event, ...]]]:
    """(session index, one command's events) in the fake clock's order: round by round over
    the ordinary sessions, the long session's commands placed at their slots."""
    long_index = len(traffic.session_ids) - 1 if plan.long_commands else -1
    long_times = plan.long_times() if plan.long_commands else []
    next_long = 0
    for position in range(plan.rounds):
        for index in range(plan.sessions):
            slot = plan.time_of(index, position)
            while next_long < len(long_times) and long_times[next_long] <= slot:
                yield long_index, traffic.commands[long_index][next_long]
                next_long += 1
            session = traffic.commands[index]
            if position < len(session):
                yield index, session[position]
    while next_long < len(long_times):
        yield long_index, traffic.commands[long_index][next_long]
        next_long += 1


async def append_all(
    url: str,
    traffic: Traffic,
    plan: Plan,
    batch_size: int = MAX_BATCH,
    label: str = "appending",
) -> int:
    """Append the traffic in interleaved order with atomic batches of up to `batch_size`
    messages; returns the stream's last sequence. A session appears at most once per batch,
    each append expecting the session's last stored sequence (as the gateway's OCC does)."""
    nc = await nats.connect(url)
    last_seq = [0] * len(traffic.session_ids)
    # Each session's index header as the gateway writes it (`contracts.session_index`).
    indexes: list[SessionIndex | None] = [EMPTY_INDEX] * len(traffic.session_ids)
    group: list[SessionAppend] = []
    members: list[int] = []
    size = 0
    stream_seq = 0
    batches = 0

    async def flush() -> None:
        nonlocal group, members, size, stream_seq, batches
        stream_seq = await publish_atomic(nc, group, f"fill-{plan.prefix}-{batches}", timeout_s=30)
        batches += 1
        # The batch's messages are stored contiguously, ending at the returned sequence.
        seq = stream_seq - size
        for index, append in zip(members, group, strict=True):
            seq += len(append.events)
            last_seq[index] = seq
            indexes[index] = append.stored(seq)
        group, members, size = [], [], 0

    try:
        with _progress() as progress:
            task = progress.add_task(label, total=traffic.events)
            in_group: set[int] = set()
            for index, events in interleaved(traffic, plan):
                if group and (size + len(events) > batch_size or index in in_group):
                    await flush()
                    progress.update(task, completed=stream_seq)
                    in_group = set()
                group.append(
                    SessionAppend(
                        traffic.session_ids[index], last_seq[index], events, index=indexes[index]
                    )
                )
                members.append(index)
                in_group.add(index)
                size += len(events)
            if group:
                await flush()
    finally:
        await nc.close()
    return stream_seq
