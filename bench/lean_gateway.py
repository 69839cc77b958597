"""The gateway with the core's part of an inject made by `bench.lean_inject`: a measurement.

    python -m bench.lean_gateway      # serves as `reminders serve gateway` does

`bench.gateway_floor`'s `gateway_lean` mode spawns this in place of `reminders serve gateway`.
It is the gateway itself, every part of it as it serves (the request's validation, caller
check, session cache, limits, group commit, metrics, reply), with one function replaced: the
core's `decide` in `services.gateway.command` becomes `LeanSessions.decide_command`, which
writes the same event bytes for an inject straight into pending with only the work those bytes
need (a unit test holds them equal to the core's). So its rate is what the gateway would reach
with a core that cost no more than the least work its output needs, measured rather than
summed from the parts. It knows one kind of command and keeps each session's lean state in
memory; it is not a gateway to run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bench.lean_inject import LeanDecision, LeanSessions
from contracts import commands as cmd
from contracts.state import SessionState
from core.config import CommandContext

#: What the gateway's command module calls the core's decide.
_CORE_DECIDE = "decide"


def lean_decide(sessions: LeanSessions) -> Callable[..., LeanDecision]:
    """A stand-in for `core.decide` as the gateway calls it, deciding by `sessions`."""

    def decide(
        state: SessionState,
        command: cmd.Command,
        context: CommandContext,
        config: object = None,
        warnings: Sequence[object] = (),
    ) -> LeanDecision:
        # The state decided on is the empty one a new session loads as: the lean path keeps
        # its own; the configuration's limits and the request's warnings change nothing an
        # inject of the benchmark's load writes.
        del state, config, warnings
        return sessions.decide_command(command, context)

    return decide


def main() -> None:
    """`reminders serve gateway` with the lean path in place of the core's decide."""
    from cli.main import app
    from services.gateway import command

    # The name `services.gateway.command` calls the core's decide by, rebound in its module.
    setattr(command, _CORE_DECIDE, lean_decide(LeanSessions()))
    app(["serve", "gateway"])


if __name__ == "__main__":
    main()
