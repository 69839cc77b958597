"""The gateway's command path is a plain function of (command, ports): tested here without a
broker, against an in-memory log, scripted commit failures and a clock only the test moves."""

from __future__ import annotations

from typing import Any

from contracts.commands import Command, parse_command
from contracts.events import Event
from contracts.state import SessionState
from core import CommandContext, CoreConfig, Decision, fold_all
from services.adapters.append import SessionAppend
from services.gateway.command import (
    CachedSession,
    Deadline,
    LogUnavailable,
    run_command,
)
from services.gateway.committer import (
    CommitConflict,
    CommitFailed,
    CommitInProcess,
    CommitUnavailable,
    CommitUncertain,
)
from tests.support import context_for

TIMEOUT_S = 5.0


class FakePorts:
    """An in-memory log of one gateway's sessions; `failures` are raised by the next commits
    (a tuple `(error, True)` stores the batch first, as a leader that stepped down after
    committing would); reads fail (after up to 1 s) while `reads_fail` is positive. Every
    wait advances the fake clock by the time it took."""

    def __init__(self, *failures: Exception | tuple[Exception, bool], conflict_retries: int = 5):
        self.core = CoreConfig()
        self.conflict_retries = conflict_retries
        self.now = 100.0
        self.log: list[tuple[Event, int]] = []
        self.failures = list(failures)
        self.reads_fail = 0
        self.commits = 0
        self.conflicts = 0
        self.refuse: dict[str, Any] | None = None
        self.checked: list[SessionState] = []
        self.commit_takes_s = 0.0
        self.commit_timeouts: list[float] = []
        self.cached: CachedSession | None = None
        #: Reads served by a replica that has the log only through `lag_through`.
        self.lagging_reads = 0
        self.lag_through = 0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds

    def jitter(self) -> float:
        return 0.5

    def new_context(self) -> CommandContext:
        return context_for(1, "n0nce")

    async def load(self, session_id: str, timeout_s: float) -> CachedSession:
        if self.cached is not None:
            return self.cached
        entry, _ = await self.read(session_id, timeout_s, None)
        return entry

    async def read(
        self, session_id: str, timeout_s: float, events_after: int | None
    ) -> tuple[CachedSession, list[tuple[Event, int]]]:
        assert timeout_s > 0
        if self.reads_fail:
            self.reads_fail -= 1
            self.now += min(1.0, timeout_s)
            raise LogUnavailable("read timed out")
        through = self.lag_through if self.lagging_reads else len(self.log)
        self.lagging_reads = max(0, self.lagging_reads - 1)
        events = [
            (event, seq)
            for event, seq in self.log
            if event.session_id == session_id and seq <= through
        ]
        last = events[-1][1] if events else 0
        kept = [] if events_after is None else [item for item in events if item[1] > events_after]
        return CachedSession(fold_all(SessionState(), events), last), kept

    async def commit(self, append: SessionAppend, timeout_s: float) -> list[int]:
        self.commits += 1
        self.commit_timeouts.append(timeout_s)
        if self.commit_takes_s >= timeout_s:  # a paused leader: no PubAck in time
            self.now += timeout_s
            raise CommitUncertain("no answer before the deadline")
        self.now += self.commit_takes_s
        failure = self.failures.pop(0) if self.failures else None
        if isinstance(failure, tuple):
            self._store(append)
            raise failure[0]
        if failure is not None:
            raise failure
        last = max(
            (seq for event, seq in self.log if event.session_id == append.session_id), default=0
        )
        if last != append.expected_last_seq:
            raise CommitConflict("wrong last sequence")
        return self._store(append)

    async def last_stream_seq(self, session_id: str, timeout_s: float) -> int:
        assert timeout_s > 0
        return max((seq for event, seq in self.log if event.session_id == session_id), default=0)

    async def stored_reply(
        self, session_id: str, session_seq: int, timeout_s: float
    ) -> dict[str, Any] | None:
        assert timeout_s > 0
        for event, _ in self.log:
            if event.session_id == session_id and event.session_seq == session_seq:
                return event.reply
        return None

    def _store(self, append: SessionAppend) -> list[int]:
        start = len(self.log) + 1
        seqs = list(range(start, start + len(append.events)))
        self.log.extend(zip(append.events, seqs, strict=True))
        return seqs

    def check_caller(self, command: Command, state: SessionState) -> dict[str, Any] | None:
        self.checked.append(state)
        return self.refuse

    def remember(self, entry: CachedSession, decision: Decision, seqs: list[int]) -> None:
        self.cached = CachedSession(
            fold_all(entry.state, list(zip(decision.events, seqs, strict=True))), seqs[-1]
        )

    def forget_cached(self, session_id: str, conflict: bool) -> None:
        self.cached = None
        self.conflicts += conflict

    def deadline(self) -> Deadline:
        return Deadline(self.now + TIMEOUT_S, self)


def inject(body: str = "check the tests", session_id: str = "s1") -> tuple[Command, list[Any]]:
    command, warnings = parse_command(
        "inject", {"session_id": session_id, "reminder": {"body": body}}
    )
    return command, list(warnings)


async def run(ports: FakePorts, command: tuple[Command, list[Any]] | None = None) -> dict[str, Any]:
    command = command or inject()
    deadline = ports.deadline()
    reply = await run_command(command[0], command[1], ports, deadline)
    assert ports.now <= deadline.at, "the reply went out after the command's deadline"
    return reply


def kinds(ports: FakePorts) -> list[str]:
    return [event.kind for event, _ in ports.log]


async def test_a_command_is_loaded_checked_decided_committed_and_answered() -> None:
    ports = FakePorts()
    reply = await run(ports)
    assert reply["ok"] is True and reply["session_seq"] == 1
    assert kinds(ports) == ["injected"]
    assert ports.checked == [SessionState()]
    assert ports.cached is not None and ports.cached.last_stream_seq == 1


async def test_the_caller_check_runs_before_decide_and_a_refusal_appends_nothing() -> None:
    ports = FakePorts()
    ports.refuse = {"ok": False, "error": {"code": "forbidden", "message": "no", "details": {}}}
    reply = await run(ports)
    assert reply == ports.refuse
    assert ports.log == [] and ports.commits == 0


async def test_a_conflict_re_reads_and_decides_again() -> None:
    ports = FakePorts(CommitConflict("wrong last sequence"))
    reply = await run(ports)
    assert reply["ok"] is True
    assert ports.conflicts == 1 and ports.commits == 2
    assert kinds(ports) == ["injected"]


async def test_conflicts_beyond_the_bound_give_up_with_a_conflict() -> None:
    ports = FakePorts(*[CommitConflict("x") for _ in range(3)], conflict_retries=2)
    reply = await run(ports)
    assert reply["error"]["code"] == "conflict"
    assert reply["error"]["details"] == {"retries": 2}
    assert ports.log == []


async def test_conflicts_after_an_unknown_outcome_never_give_up_as_a_definite_failure() -> None:
    """Found by the long fault run: a commit's PubAck was lost (the batch landed), the re-reads
    came from a replica behind it, so every new decision conflicted with the landed batch; the
    gateway gave up with `conflict`, a definite failure, for a command that was applied."""
    ports = FakePorts((CommitUncertain("PubAck lost"), True), conflict_retries=2)
    ports.lagging_reads, ports.lag_through = 100, 0
    reply = await run(ports)
    assert reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"]["maybe_applied"] is True
    assert kinds(ports) == ["injected"]


async def test_an_append_in_process_is_waited_out_and_never_called_a_conflict() -> None:
    """Found by the fail-over test in CI: on a leader cut off from its quorum, the earlier
    command's append of the session stays "in process" (10164); the next command's five
    quick retries each met it and the gateway answered `conflict` ("the session kept
    changing") while nothing could land at all."""
    ports = FakePorts(*[CommitInProcess("wrong last sequence") for _ in range(1000)])
    reply = await run(ports)
    assert reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"] == {"retry_after_ms": 1000}
    assert ports.conflicts == 0 and ports.log == []
    assert ports.commits > ports.conflict_retries + 1  # retried until the deadline, paced


async def test_an_append_in_process_that_settles_lets_the_command_through() -> None:
    ports = FakePorts(*[CommitInProcess("wrong last sequence") for _ in range(3)])
    reply = await run(ports)
    assert reply["ok"] is True and ports.commits == 4 and ports.conflicts == 0
    assert kinds(ports) == ["injected"]


async def test_a_short_election_is_ridden_out() -> None:
    ports = FakePorts(*[CommitUnavailable("no responders") for _ in range(8)])
    reply = await run(ports)
    assert reply["ok"] is True and ports.commits == 9


async def test_a_log_away_until_the_deadline_is_unavailable_in_time_with_retry_after() -> None:
    ports = FakePorts(*[CommitUnavailable("no responders") for _ in range(1000)])
    reply = await run(ports)
    assert reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"] == {"retry_after_ms": 1000}
    assert ports.log == []


async def test_an_unreadable_log_is_retried_then_unavailable() -> None:
    ports = FakePorts()
    ports.reads_fail = 1
    assert (await run(ports))["ok"] is True
    ports = FakePorts()
    ports.reads_fail = 10_000
    reply = await run(ports)
    assert reply["error"]["code"] == "unavailable" and ports.commits == 0


async def test_an_uncertain_commit_that_landed_is_answered_from_the_log_once() -> None:
    ports = FakePorts((CommitUncertain("PubAck lost"), True))
    reply = await run(ports)
    assert reply["ok"] is True and reply["session_seq"] == 1
    assert kinds(ports) == ["injected"] and ports.commits == 1


async def test_an_uncertain_commit_that_did_not_land_is_sent_again() -> None:
    ports = FakePorts(CommitUncertain("PubAck lost"))
    reply = await run(ports)
    assert reply["ok"] is True and kinds(ports) == ["injected"] and ports.commits == 2


async def test_an_outcome_still_unknown_at_the_deadline_says_it_may_be_applied() -> None:
    ports = FakePorts(*[CommitUncertain("no answer") for _ in range(1000)])
    reply = await run(ports)
    assert reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"] == {"retry_after_ms": 1000, "maybe_applied": True}
    assert "same request_id" in reply["error"]["message"]


async def test_a_permanent_refusal_is_answered_at_once() -> None:
    ports = FakePorts(CommitFailed("too large"))
    reply = await run(ports)
    assert reply["error"]["code"] == "unavailable" and ports.commits == 1
    assert ports.now == 100.0


async def test_a_refusal_after_an_unknown_outcome_says_the_first_may_be_applied() -> None:
    """Found in review: the refusal of a later attempt was answered as a definite failure,
    though the first attempt's batch (its PubAck lost) may have been stored."""
    ports = FakePorts(CommitUncertain("PubAck lost"), CommitFailed("too large"))
    reply = await run(ports)
    assert reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"] == {"maybe_applied": True}
    assert "same request_id" in reply["error"]["message"]


async def test_a_rejected_command_appends_nothing_and_commits_nothing() -> None:
    command, warnings = parse_command("revoke", {"session_id": "s1", "reminder_id": "nope"})
    ports = FakePorts()
    reply = await run(ports, (command, list(warnings)))
    assert reply["ok"] is False and ports.commits == 0


async def test_a_paused_leader_is_answered_unavailable_by_the_deadline_not_after() -> None:
    ports = FakePorts()
    ports.commit_takes_s = 30.0  # SIGSTOP of the stream leader
    deadline = ports.deadline()
    command, warnings = inject()
    reply = await run_command(command, warnings, ports, deadline)
    assert reply["error"]["code"] == "unavailable"
    assert reply["error"]["details"] == {"retry_after_ms": 1000, "maybe_applied": True}
    assert ports.now <= deadline.at
    assert ports.commit_timeouts == [TIMEOUT_S]


async def test_every_wait_is_given_only_the_time_left() -> None:
    ports = FakePorts(CommitUnavailable("no leader"), CommitUncertain("lost"))
    ports.commit_takes_s = 1.2
    ports.reads_fail = 1
    reply = await run(ports)
    assert reply["ok"] is True
    assert ports.commits == 3
    # each commit was given what was left of the 5 s, less what the earlier waits used
    assert ports.commit_timeouts[0] < TIMEOUT_S
    assert ports.commit_timeouts == sorted(ports.commit_timeouts, reverse=True)


async def test_a_command_with_no_time_left_is_not_even_loaded() -> None:
    ports = FakePorts()
    deadline = Deadline(ports.now, ports)
    command, warnings = inject()
    reply = await run_command(command, warnings, ports, deadline)
    assert reply["error"]["details"] == {"retry_after_ms": 1000}
    assert ports.commits == 0 and ports.checked == []


async def test_a_no_op_decided_on_a_cached_session_behind_the_log_is_decided_again() -> None:
    """Two replicas: B cached the session before A appended a reminder. A render that B
    would decide as "nothing due" on its cache must see A's acked write (found by the
    fault suite's history checker as a stale read)."""
    replica_b = FakePorts()
    render = parse_command("render", {"session_id": "s1", "turn": 0})
    assert (await run(replica_b, (render[0], list(render[1]))))["envelope"] is None
    replica_b.cached = CachedSession(SessionState(), 0)  # B's cache, before A's write
    replica_a = FakePorts()
    replica_a.log = replica_b.log  # one log, two gateways
    await run(replica_a, inject("written through replica A"))
    reply = await run(replica_b, (render[0], list(render[1])))
    assert reply["envelope"] is not None and len(reply["envelope"]["directive_ids"]) == 1
    assert kinds(replica_b) == ["injected", "fired", "delivered"]


async def test_a_no_op_decided_on_a_lagging_read_after_an_unknown_outcome_is_read_again() -> None:
    """A `clear` whose commit landed but whose PubAck was lost; the session is re-read from a
    stream replica still catching up (after a partition healed), which has neither the
    reminder nor the clear, so the clear decides "nothing to clear". Answering that would
    show the client a session behind what it had seen (found by the soak's history checker:
    a stale read, and session_seq going backwards); the leader's last seq says the read is
    behind, so it is read again and answered from the log."""
    ports = FakePorts()
    tagged = parse_command(
        "inject", {"session_id": "s1", "reminder": {"body": "to be cleared", "tags": ["t0"]}}
    )
    await run(ports, (tagged[0], list(tagged[1])))
    ports.failures = [(CommitUncertain("PubAck lost"), True)]
    ports.lagging_reads, ports.lag_through = 1, 0
    clear = parse_command("clear", {"session_id": "s1", "selector": {"tag": "t0"}})
    reply = await run(ports, (clear[0], list(clear[1])))
    assert reply["ok"] is True and reply["session_seq"] == 2
    assert kinds(ports) == ["injected", "expired"] and ports.commits == 2


async def test_a_repeated_render_compacted_since_gets_its_first_reply_from_the_log() -> None:
    """A render stored while its reply was lost on the way; the client sends it again with
    the same request_id after another client compacted the session, which digested the
    envelope the state rebuilds that reply from. The first reply, text and all, is on the
    render's last event (found by the soak's history checker: the repeat was answered
    `invalid_request`, a definite failure, for a render that was stored)."""
    ports = FakePorts()
    await run(ports, inject("due at the next render"))
    render = parse_command("render", {"session_id": "s1", "turn": 0, "request_id": "r1"})
    first = await run(ports, (render[0], list(render[1])))
    assert first["ok"] is True and first["envelope"]["text"]
    compact = parse_command("compact", {"session_id": "s1", "turn": 0})
    assert (await run(ports, (compact[0], list(compact[1]))))["ok"] is True
    events = len(ports.log)
    assert await run(ports, (render[0], list(render[1]))) == first
    assert len(ports.log) == events
