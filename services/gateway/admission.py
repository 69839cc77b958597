"""How many commands a gateway serves at once: a bound that holds the latency of what it
admits while it has to shed load.

Group commit makes a gateway faster with more commands in flight (one commit carries many
sessions' batches), and a client that keeps many commands outstanding chose to wait behind
its own: so while nothing is shed, the bound is `REMINDERS_MAX_IN_FLIGHT`. Once commands are
shed, more arrive than the gateway can serve, and every one admitted past what it serves
within `REMINDERS_SHED_LATENCY_MS` only waits behind the others: with a target set, the
admitted commands' mean latency is held to it by lowering the bound in proportion (latency
is in flight over throughput, Little's law), and the bound grows back by an eighth per
window while the latency is under the target or nothing is shed. Without a target (the
default) the bound stays at the maximum: holding the latency costs throughput, measured in
`docs/reliability.md`.

The clock is passed in, so the rule is unit-tested without one (`tests/unit/test_admission.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: How often the bound is looked at (seconds): long enough to average many commands, short
#: enough that a sudden overload is answered before the admitted ones queue for long.
WINDOW_S = 0.1
#: The bound never goes below this: enough for group commit to carry several sessions.
FLOOR = 4


@dataclass
class Admission:
    """The in-flight bound of one gateway and the window it is adjusted on."""

    cap: int
    target_s: float
    limit: int = 0
    in_flight: int = 0
    window_start: float = 0.0
    latency_sum: float = 0.0
    served: int = 0
    shed: int = 0

    def __post_init__(self) -> None:
        self.limit = self.limit or self.cap

    def admit(self, now: float) -> bool:
        """True when a command may be served now (count it in flight); False to shed it."""
        self._adjust(now)
        if self.in_flight >= self.limit:
            self.shed += 1
            return False
        self.in_flight += 1
        return True

    def done(self, latency_s: float, now: float) -> None:
        """A command admitted earlier was answered after `latency_s`."""
        self.in_flight -= 1
        self.latency_sum += latency_s
        self.served += 1
        self._adjust(now)

    def _adjust(self, now: float) -> None:
        if now - self.window_start < WINDOW_S:
            return
        # The latency is judged only in a window that shed and answered something.
        judged = self.shed and self.served and self.target_s > 0
        mean = self.latency_sum / self.served if judged else 0.0
        if judged and mean > self.target_s:
            # Towards what holds the target, at most halving at once: one slow window
            # (a garbage collection, a leader election) must not empty the gateway.
            self.limit = max(FLOOR, self.limit // 2, int(self.limit * self.target_s / mean))
        elif judged or not self.shed:
            self.limit = min(self.cap, self.limit + max(1, self.limit // 8))
        self.window_start, self.latency_sum, self.served, self.shed = now, 0.0, 0, 0
