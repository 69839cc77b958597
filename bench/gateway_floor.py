"""What the core's part of a command leaves of the null gateway's rate, in one run.

    python -m bench.gateway_floor [--sessions 64] [--per-session 50] [--rounds 2]

Issue #19 asks one gateway for 0.5x of the null gateway (`bench.null_gateway`: one publish with
the expectation, its ack, a reply) at 64 sessions, or, where that is missed, for a measurement of
why the stage that holds it cannot go lower. This runs, on one server with the load of
`write_gateway` (each session's injects with a dedupe key, one in flight per session), in
rounds:

- `null`: the null gateway;
- `null_lean`: the same process making each command's events as the core would, byte for
  byte, with nothing but the work they need (`null_gateway --lean`: `bench.lean_inject`);
- `null_core`: the same process doing the core's part of each command as well
  (`null_gateway --core`: the request validated, decided by the core against the session's
  state in memory, the events folded) and nothing else a gateway does;
- `gateway`: `reminders serve gateway`.

Each with its commands/s and its process's CPU per command (from `/proc`, in the kernel's
10 ms ticks). `null_core` against `null` is what the core alone costs a process that does
the messages no gateway can avoid; `null_lean` against `null` is what the same output costs
made without the core's models and rules, the best a rewrite of the core could keep. With
`--gateway-runtime`, `null_lean` and `null_core` run on the gateway's event loop and collector
threshold, so the gateway less `null_core` is what the gateway's own parts cost. Results go
to bench/results/gateway_floor.json.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from bench.common import CpuMeter, embedded_server, emit, provision_server, running_services
from bench.write_path import drive_injects, null_gateway, warm_up

MODES = ("null", "null_lean", "null_core", "gateway")
#: The null gateway's flags of each mode that runs it.
_NULL_FLAGS = {"null": [], "null_lean": ["--lean"], "null_core": ["--core"]}


def _measure(
    url: str, mode: str, pid: int, tag: str, sessions: int, per_session: int
) -> dict[str, Any]:
    """The load through the running process `pid`: commands/s and its CPU µs per command."""
    asyncio.run(warm_up(url, f"warm-{tag}"))
    meter = CpuMeter({mode: pid})
    per_s, failed, _ = asyncio.run(drive_injects(url, tag, sessions, per_session))
    cpu_ms = meter.ms_per(sessions * per_session)[mode]
    if failed:
        raise RuntimeError(f"{mode}: {failed} commands failed")
    return {"mode": mode, "commands_per_s": per_s, "cpu_us_per_command": round(cpu_ms * 1000, 1)}


def one_pass(
    url: str, mode: str, tag: str, sessions: int, per_session: int, gateway_runtime: bool = False
) -> dict[str, Any]:
    """One mode under the load, on sessions of its own (`tag`); with `gateway_runtime`, the
    `null_lean` and `null_core` processes run as the gateway's does (`--gateway-runtime`)."""
    if mode == "gateway":
        with running_services(url, ["gateway"]) as services:
            pid = services["gateway"].process.pid
            return _measure(url, mode, pid, tag, sessions, per_session)
    flags = _NULL_FLAGS[mode] + (
        ["--gateway-runtime"] if gateway_runtime and mode != "null" else []
    )
    with null_gateway(url, *flags) as process:
        return _measure(url, mode, process.pid, tag, sessions, per_session)


def run(
    sessions: int, per_session: int, rounds: int, gateway_runtime: bool = False
) -> dict[str, Any]:
    """`rounds` rounds of every mode on one fresh server, then each mode's best rate."""
    passes: list[dict[str, Any]] = []
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        for number in range(rounds):
            for mode in MODES:
                tag = f"{mode}-{number}"
                result = one_pass(server.url, mode, tag, sessions, per_session, gateway_runtime)
                passes.append(result)
                print(
                    f"{mode}: {result['commands_per_s']:,.0f} commands/s, "
                    f"{result['cpu_us_per_command']} µs CPU per command",
                    flush=True,
                )
    best = {mode: max(p["commands_per_s"] for p in passes if p["mode"] == mode) for mode in MODES}
    return {
        "sessions": sessions,
        "commands": sessions * per_session,
        "gateway_runtime": gateway_runtime,
        "passes": passes,
        "best_commands_per_s": best,
        "ratio_of_best_null": {
            mode: round(value / best["null"], 3) for mode, value in best.items()
        },
    }


def main() -> None:
    """Parse the arguments, run, write bench/results/gateway_floor.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--per-session", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--gateway-runtime",
        action="store_true",
        help="run null_lean and null_core on the gateway's event loop and collector threshold",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    result = run(args.sessions, args.per_session, args.rounds, args.gateway_runtime)
    emit("gateway_floor", result, args.output)


if __name__ == "__main__":
    main()
