"""How many commands a gateway serves at once: a bound that holds the latency of what it
admits while it has to shed load.

Group commit makes a gateway faster with more commands in flight (one commit carries many
sessions' batches), and a client that keeps many commands outstanding chose to wait behind
its own: so while nothing is shed, the bound is `REMINDERS_MAX_IN_FLIGHT`. Once commands are
shed, more arrive than the gateway can serve, and every one admitted past what it serves
within a target latency only waits behind the others: the admitted commands' mean latency
is held to the target by lowering the bound in proportion (latency is in flight over
throughput, Little's law), and the bound grows back by an eighth per window while the
latency is under the target or nothing is shed.

The target is `REMINDERS_SHED_LATENCY_MS` when set; otherwise `REMINDERS_SHED_LATENCY_FACTOR`
times what a command costs this gateway unloaded: a moving average of the latency of the
commands it served alone (nothing else in flight at any time while each was), so the target
follows the machine and the cluster it runs on rather than a figure tuned on one of them.
With both at 0 the bound stays at the maximum. Holding the latency costs throughput under
overload; the trade-off is measured in `docs/reliability.md`.

The clock is passed in, so the rule is unit-tested without one (`tests/unit/test_admission.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: How often the bound is looked at (seconds): long enough to average many commands, short
#: enough that a sudden overload is answered before the admitted ones queue for long.
WINDOW_S = 0.1
#: The bound never goes below this: enough for group commit to carry several sessions.
FLOOR = 4
#: The weight of each new lone command's latency in the moving average of `unloaded_s`:
#: about the last twenty, so one slow command (a cold session read from the log) moves it
#: little and a gateway moved to a slower cluster follows within a few dozen commands.
UNLOADED_WEIGHT = 0.05


@dataclass
class Admission:
    """The in-flight bound of one gateway and the window it is adjusted on: `target_s` fixes
    the latency held while shedding; without it (0) the target is `factor` times
    `unloaded_s`, the moving average latency of commands served alone (0: none seen yet)."""

    cap: int
    target_s: float
    factor: float = 0.0
    unloaded_s: float = 0.0
    limit: int = 0
    in_flight: int = 0
    window_start: float = 0.0
    latency_sum: float = 0.0
    served: int = 0
    shed: int = 0
    #: Serial number of the last command admitted, and of the one in flight alone (0: none).
    serial: int = 0
    lone: int = 0

    def __post_init__(self) -> None:
        self.limit = self.limit or self.cap

    def admit(self, now: float) -> int:
        """A ticket (> 0) when a command may be served now (count it in flight), for `done`;
        0 to shed it."""
        self._adjust(now)
        if self.in_flight >= self.limit:
            self.shed += 1
            return 0
        self.serial += 1
        # A command is served alone when nothing else was in flight at any time while it was:
        # one admitted alone stops being so as soon as another is admitted beside it.
        self.lone = self.serial if self.in_flight == 0 else 0
        self.in_flight += 1
        return self.serial

    def done(self, ticket: int, latency_s: float, now: float) -> None:
        """The command admitted with `ticket` was answered after `latency_s`."""
        self.in_flight -= 1
        self.latency_sum += latency_s
        self.served += 1
        if ticket and ticket == self.lone:
            # Only such a command measures the gateway unloaded: one that was alone only when
            # admitted, at saturation, waits behind the commands admitted after it.
            self.lone = 0
            last = self.unloaded_s or latency_s
            self.unloaded_s = last + UNLOADED_WEIGHT * (latency_s - last)
        self._adjust(now)

    def target(self) -> float:
        """The mean latency held while shedding (0: none, the bound stays at the cap)."""
        return self.target_s or self.factor * self.unloaded_s

    def _adjust(self, now: float) -> None:
        if now - self.window_start < WINDOW_S:
            return
        # The latency is judged only in a window that shed and answered something.
        target = self.target()
        judged = self.shed and self.served and target > 0
        mean = self.latency_sum / self.served if judged else 0.0
        if judged and mean > target:
            # Towards what holds the target, at most halving at once: one slow window
            # (a garbage collection, a leader election) must not empty the gateway.
            self.limit = max(FLOOR, self.limit // 2, int(self.limit * target / mean))
        elif judged or not self.shed:
            self.limit = min(self.cap, self.limit + max(1, self.limit // 8))
        self.window_start, self.latency_sum, self.served, self.shed = now, 0.0, 0, 0
