"""The gateway's in-flight bound (`services/gateway/admission.py`): the cap while nothing is
shed; while commands are shed, lowered until the admitted commands' mean latency keeps to
the target, and grown back once it does or once nothing is shed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.gateway.admission import FLOOR, WINDOW_S, Admission


def fill(admission: Admission, now: float) -> int:
    """Admit until refused; how many were admitted."""
    admitted = 0
    while admission.admit(now):
        admitted += 1
    return admitted


def test_the_cap_is_the_bound_while_nothing_is_shed() -> None:
    admission = Admission(cap=64, target_s=0.02)
    assert fill(admission, 0.0) == 64 and admission.in_flight == 64
    admission.done(0, 0.5, 0.05)  # slow, but nothing was shed in a window that ended
    assert admission.admit(0.05) and not admission.admit(0.05)


def test_while_shedding_a_slow_window_lowers_the_bound_towards_the_target() -> None:
    admission = Admission(cap=64, target_s=0.02)
    fill(admission, 0.0)  # 64 in flight, one shed
    for _ in range(32):
        admission.done(0, 0.05, 0.09)  # mean 50 ms against a target of 20 ms
    # The window ends: 64 · 20/50 would be 25, but a bound is at most halved at once, and
    # the 32 still in flight fill it.
    assert admission.admit(WINDOW_S) == 0
    assert admission.limit == 32 and admission.in_flight == 32
    while admission.in_flight > 20:
        admission.done(0, 0.05, WINDOW_S + 0.01)
    assert fill(admission, WINDOW_S + 0.01) == 12


def test_the_bound_never_goes_below_the_floor() -> None:
    admission = Admission(cap=64, target_s=0.001)
    now = 0.0
    for _ in range(20):
        fill(admission, now)
        while admission.in_flight:
            admission.done(0, 10.0, now)
        now += WINDOW_S
        admission.admit(now)
        admission.done(0, 10.0, now)
    assert admission.limit == FLOOR


def test_it_grows_back_to_the_cap_once_nothing_is_shed() -> None:
    admission = Admission(cap=64, target_s=0.02, limit=FLOOR)
    now = 0.0
    for _ in range(40):
        now += WINDOW_S
        assert admission.admit(now)
        admission.done(0, 0.001, now)
    assert admission.limit == 64


def test_while_shedding_within_the_target_it_grows_an_eighth_a_window() -> None:
    admission = Admission(cap=64, target_s=0.02, limit=16)
    fill(admission, 0.0)
    while admission.in_flight:
        admission.done(0, 0.01, 0.05)
    admission.admit(WINDOW_S)
    assert admission.limit == 18


def test_a_target_of_zero_keeps_the_cap() -> None:
    admission = Admission(cap=8, target_s=0.0)
    fill(admission, 0.0)
    while admission.in_flight:
        admission.done(0, 5.0, 0.05)
    assert fill(admission, WINDOW_S) == 8


@given(
    st.lists(
        st.tuples(st.booleans(), st.floats(min_value=0.0, max_value=2.0)),
        min_size=1,
        max_size=300,
    )
)
def test_the_bound_stays_between_the_floor_and_the_cap(steps: list[tuple[bool, float]]) -> None:
    admission = Admission(cap=32, target_s=0.02)
    now = 0.0
    for arrive, latency in steps:
        now += 0.013
        if arrive:
            admission.admit(now)
        elif admission.in_flight:
            admission.done(0, latency, now)
        assert FLOOR <= admission.limit <= 32
        assert 0 <= admission.in_flight <= 32


def test_without_a_fixed_target_it_holds_a_multiple_of_the_latency_served_alone() -> None:
    admission = Admission(cap=64, target_s=0.0, factor=4.0)
    # No command served alone yet: nothing to measure against, the bound stays the cap.
    fill(admission, 0.0)
    while admission.in_flight:
        admission.done(0, 0.5, 0.05)
    assert fill(admission, WINDOW_S) == 64
    while admission.in_flight:
        admission.done(0, 0.5, WINDOW_S + 0.01)
    now = 2 * WINDOW_S
    for _ in range(3):
        ticket = admission.admit(now)
        admission.done(ticket, 0.005, now)
    assert admission.unloaded_s == 0.005 and admission.target() == 0.02
    # Shedding at a mean of 50 ms against 4 × 5 ms: lowered as a fixed 20 ms target would.
    fill(admission, now)
    while admission.in_flight:
        admission.done(0, 0.05, now + 0.01)
    admission.admit(3 * WINDOW_S)
    assert admission.limit == 32


def test_a_command_admitted_alone_but_joined_does_not_measure_the_unloaded_latency() -> None:
    admission = Admission(cap=8, target_s=0.0, factor=4.0)
    first = admission.admit(0.0)
    second = admission.admit(0.0)  # beside the first, which is no longer alone
    admission.done(first, 0.2, 0.0)
    admission.done(second, 0.2, 0.0)
    assert admission.unloaded_s == 0.0
    alone = admission.admit(0.0)
    admission.done(alone, 0.004, 0.0)
    assert admission.unloaded_s == 0.004
    # One admitted alone and still served alone after the other finished counts again.
    late = admission.admit(0.0)
    admission.done(late, 0.006, 0.0)
    assert 0.004 < admission.unloaded_s < 0.006


def test_one_slow_lone_command_moves_the_unloaded_latency_little() -> None:
    admission = Admission(cap=8, target_s=0.0, factor=4.0)
    for latency in (0.004, 0.004, 0.1):
        admission.done(admission.admit(0.0), latency, 0.0)
    assert 0.004 < admission.unloaded_s < 0.01
    assert Admission(cap=8, target_s=0.03, factor=4.0, unloaded_s=0.001).target() == 0.03


@given(st.lists(st.floats(min_value=0.0001, max_value=10.0), min_size=1, max_size=50))
def test_the_unloaded_latency_stays_within_what_was_measured(latencies: list[float]) -> None:
    admission = Admission(cap=8, target_s=0.0, factor=4.0)
    for latency in latencies:
        admission.done(admission.admit(0.0), latency, 0.0)
    assert min(latencies) * 0.999 <= admission.unloaded_s <= max(latencies) * 1.001
