"""The core's `decide` per command, without NATS: the gateway's load, and one long session.

    python bench/decide_profile.py [--sessions 64] [--commands 125] [--life 5000] [--turns 2000]
                                   [--output F]

- `interleaved`: `--sessions` sessions take turns, each sending `--commands` injects with a
  dedupe key (the `write_gateway` scenario's commands, `bench.traffic.inject_payload`);
  the mean µs of `decide` per command after the first fifth (a warm-up).
- `life`: one session sent `--life` such injects in a row; the mean µs of `decide` per
  command in each window of its life (up to 100, 1,000, 3,000, then `--life` commands), to
  show whether a command costs more as the session's history grows.
- `turns`: one session lives `--turns` turns of an agent's loop: a reminder for the turn
  injected (`ttl_turns` 1), the turn rendered, the reminder acknowledged, the turn ended;
  the mean µs of `decide` per command in each window of turns (up to 100, 1,000, then
  `--turns`). Each turn delivers one envelope, so the session gathers digests of older
  envelopes and acknowledged reminders, which only a long life does.

Each command is decided on the state the previous one left, as the gateway keeps it
(`Decision.state_after`; a tree without it folds the events). Only `decide` is timed: the
validation before it and the fold or cache after it are not. Run it as a file with
`PYTHONPATH` set to a tree's root to measure that tree.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench.common import emit
from bench.traffic import inject_payload
from contracts import commands as cmd
from contracts.state import SessionState
from core import Decision, decide, fold_all
from services.adapters.ids import fresh_context

#: The last command of each window of `life` but the last (which ends at `--life`).
WINDOW_ENDS = (100, 1_000, 3_000)


def _after(decision: Decision, state: SessionState, stream_seq: int) -> SessionState:
    """The state the gateway keeps after a decision stored at `stream_seq`."""
    state_after = getattr(decision, "state_after", None)
    if state_after is None:  # a tree from before `state_after`
        return fold_all(state, [(event, stream_seq) for event in decision.events])
    return state_after(state, stream_seq)  # type: ignore[no-any-return]


def _timed_decide(state: SessionState, session_id: str, n: int) -> tuple[float, Decision]:
    """Seconds `decide` took for the n-th inject of a session, and its decision."""
    command, _ = cmd.parse_command("inject", inject_payload(session_id, n))
    context = fresh_context()
    started = time.perf_counter()
    decision = decide(state, command, context)
    elapsed = time.perf_counter() - started
    if not decision.ok:
        raise RuntimeError(f"inject refused: {decision.reply.get('error', {}).get('code')}")
    return elapsed, decision


def interleaved(sessions: int, commands: int) -> float:
    """Mean µs of `decide` per command, sessions taking turns, after a warm-up fifth."""
    states: dict[str, SessionState] = {}
    warm_up = sessions * commands // 5
    total, timed, seq = 0.0, 0, 0
    for n in range(commands):
        for number in range(sessions):
            session_id = f"decide-{number}"
            state = states.get(session_id) or SessionState()
            elapsed, decision = _timed_decide(state, session_id, n)
            seq += len(decision.events)
            states[session_id] = _after(decision, state, seq)
            if n * sessions + number >= warm_up:
                total, timed = total + elapsed, timed + 1
    return round(total / timed * 1e6, 1)


def life(commands: int) -> dict[str, float]:
    """Mean µs of `decide` per command in each window of one session's life."""
    ends = [end for end in WINDOW_ENDS if end < commands] + [commands]
    state, start, total = SessionState(), 0, 0.0
    windows: dict[str, float] = {}
    for n in range(1, commands + 1):
        elapsed, decision = _timed_decide(state, "decide-life", n)
        state = _after(decision, state, n)
        total += elapsed
        if n == ends[len(windows)]:
            windows[f"{start + 1}-{n}"] = round(total / (n - start) * 1e6, 1)
            start, total = n, 0.0
    return windows


def _turn(state: SessionState, turn: int, n: int) -> tuple[float, SessionState, int]:
    """One turn of the agent's loop on `state` (its commands numbered from `n`): seconds of
    `decide` over its four commands, the state after them and the next number."""
    spent = 0.0
    steps: list[tuple[str, dict[str, Any]]] = [
        ("inject", {"reminder": {"body": f"turn {turn}: keep the tests green", "ttl_turns": 1}}),
        ("render", {"turn": turn}),
        ("acknowledge", {"turn": turn, "outcome": "acted"}),
        ("end_turn", {"turn": turn}),
    ]
    reminder_id = ""
    for op, fields in steps:
        if op == "acknowledge":
            fields["reminder_id"] = reminder_id
        command, _ = cmd.parse_command(op, {"session_id": "decide-turns", **fields})
        context = fresh_context()
        started = time.perf_counter()
        decision = decide(state, command, context)
        spent += time.perf_counter() - started
        if not decision.ok:
            raise RuntimeError(f"{op} refused: {decision.reply.get('error', {}).get('code')}")
        reminder_id = str(decision.reply.get("reminder_id", reminder_id))
        state, n = _after(decision, state, n), n + 1
    return spent, state, n


def turns(count: int) -> dict[str, float]:
    """Mean µs of `decide` per command in each window of one session's turns."""
    ends = [end for end in WINDOW_ENDS[:2] if end < count] + [count]
    state, n, start, total = SessionState(), 1, 0, 0.0
    windows: dict[str, float] = {}
    for turn in range(count):
        spent, state, n = _turn(state, turn, n)
        total += spent
        if turn + 1 == ends[len(windows)]:
            windows[f"{start + 1}-{turn + 1}"] = round(total / (4 * (turn + 1 - start)) * 1e6, 1)
            start, total = turn + 1, 0.0
    return windows


def main() -> None:
    """Measure both and write `bench/results/decide_profile.json` (or `--output`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--commands", type=int, default=125)
    parser.add_argument("--life", type=int, default=5_000)
    parser.add_argument("--turns", type=int, default=2_000)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "sessions": args.sessions,
        "commands_per_session": args.commands,
        "interleaved_decide_us_per_command": interleaved(args.sessions, args.commands),
        "life_commands": args.life,
        "life_decide_us_per_command": life(args.life),
        "turns": args.turns,
        "turns_decide_us_per_command": turns(args.turns),
    }
    emit("decide_profile", result, args.output)


if __name__ == "__main__":
    main()
