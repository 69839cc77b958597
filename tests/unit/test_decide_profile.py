"""`bench.decide_profile` times real decisions: every inject it sends is accepted, each
session's state moves on with each command, and a life is cut into its windows."""

from __future__ import annotations

from bench import decide_profile
from contracts.state import SessionState


def test_a_life_is_cut_into_its_windows_and_every_window_is_timed() -> None:
    windows = decide_profile.life(150)
    assert list(windows) == ["1-100", "101-150"]
    assert all(value > 0 for value in windows.values())


def test_each_decision_is_made_on_the_state_the_previous_one_left() -> None:
    state = SessionState()
    for n in range(1, 4):
        _, decision = decide_profile._timed_decide(state, "s", n)
        state = decide_profile._after(decision, state, n)
        assert state.session_seq == decision.events[-1].session_seq
        assert state.stream_seq == n
    # A dedupe key: one live reminder, each inject replacing the last.
    assert len(state.pending) == 1
    assert len(state.seen_ids) == 3


def test_the_interleaved_figure_is_a_mean_of_accepted_commands() -> None:
    assert decide_profile.interleaved(sessions=3, commands=5) > 0
