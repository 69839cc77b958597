"""What the core's part of a command leaves of the null gateway's rate, in one run.

    python -m bench.gateway_floor [--sessions 64] [--per-session 50] [--rounds 2]
                                  [--modes null,gateway,...] [--gateway-runtime] [--stages]

Issue #19 asks one gateway for 0.5x of the null gateway (`bench.null_gateway`: one publish with
the expectation, its ack, a reply) at 64 sessions, or, where that is missed, for a measurement of
why the stage that holds it cannot go lower. This runs, on one server with the load of
`write_gateway` (each session's injects with a dedupe key, one in flight per session), in
rounds:

- `null`: the null gateway;
- `null_atomic`: the same process sending what SPEC §3.4 and §3.4.1 ask of a gateway in place of
  its one plain publish: each command's events (`deduped` and `injected`) group-committed into
  atomic batches by the gateway's own committer (`null_gateway --atomic`);
- `null_atomic_lean`: that, with the events made from each request as `null_lean` makes them
  (`null_gateway --atomic --lean`): every message a gateway must send, and the least work that
  makes them;
- `null_atomic_pipelined`: `null_atomic` with up to four batches in flight at once instead of
  one (`null_gateway --atomic-pipelined`), to tell whether the committer's waiting or the
  server's commits hold `null_atomic`;
- `null_lean`: the same process making each command's events as the core would, byte for
  byte, with nothing but the work they need (`null_gateway --lean`: `bench.lean_inject`);
- `null_core`: the same process doing the core's part of each command as well
  (`null_gateway --core`: the request validated, decided by the core against the session's
  state in memory, the events folded) and nothing else a gateway does;
- `gateway`: `reminders serve gateway`;
- `gateway_lean`: the same gateway with the core's `decide` replaced by the lean path
  (`bench.lean_gateway`): every other part of the gateway as it serves.

Each with its commands/s and its process's CPU per command (from `/proc`, in the kernel's 10 ms
ticks), with nats-server's and the load generator's, and how many of the machine's cores the
three kept busy on average. `null_core` against `null` is what the core alone costs a process
that does the messages no gateway can avoid; `null_lean` against `null` is what the same output
costs made without the core's models and rules, the best a rewrite of the core could keep; and
`gateway_lean` is what the whole gateway would keep with such a core, measured. With
`--gateway-runtime`, `null_lean` and `null_core` run on the gateway's event loop and collector
threshold (as does `null_atomic_lean`), so the gateway less `null_core` is what the gateway's
own parts cost, and `gateway_lean` less `null_atomic_lean` what they cost beyond the messages
the SPEC asks for. With `--stages`, each gateway mode's pass is followed by a profiled one, for
its CPU per command by stage (as `write_gateway` reports the gateway's). Results go to
bench/results/gateway_floor.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from bench.common import embedded_server, emit, provision_server, running_services
from bench.write_path import drive_injects, metered_injects, null_gateway, profiled_gateway

MODES = (
    "null",
    "null_atomic",
    "null_atomic_lean",
    "null_atomic_pipelined",
    "null_lean",
    "null_core",
    "gateway",
    "gateway_lean",
)
#: The wrapper that serves the gateway of each mode that runs one, as `running_services`
#: takes it (None: `reminders serve`).
_GATEWAY_ARGV: dict[str, dict[str, list[str]] | None] = {
    "gateway": None,
    "gateway_lean": {"gateway": [sys.executable, "-m", "bench.lean_gateway"]},
}
#: The null gateway's flags of each mode that runs it.
_NULL_FLAGS = {
    "null": [],
    "null_atomic": ["--atomic"],
    "null_atomic_lean": ["--atomic", "--lean"],
    "null_atomic_pipelined": ["--atomic-pipelined"],
    "null_lean": ["--lean"],
    "null_core": ["--core"],
}
#: The null gateway's modes that `--gateway-runtime` runs on the gateway's event loop: those
#: doing part of a command's work, set beside the gateway. `null` and `null_atomic` stay on
#: stock asyncio, so that they differ only in the messages they send.
_ON_GATEWAY_RUNTIME = frozenset({"null_lean", "null_core", "null_atomic_lean"})


def _measure(
    url: str, mode: str, pids: tuple[int, int], tag: str, sessions: int, per_session: int
) -> dict[str, Any]:
    """The load through the running process (`pids`: it, then nats-server): commands/s, and
    the CPU µs per command of it, of the server and of the load generator (this process),
    with how many of the machine's cores the three kept busy on average."""
    meter = {mode: pids[0], "nats-server": pids[1], "load": os.getpid()}
    per_s, failed, cpu_ms = metered_injects(url, tag, meter, sessions, per_session)
    if failed:
        raise RuntimeError(f"{mode}: {failed} commands failed")
    return {
        "mode": mode,
        "commands_per_s": per_s,
        "cpu_us_per_command": round(cpu_ms[mode] * 1000, 1),
        "server_cpu_us_per_command": round(cpu_ms["nats-server"] * 1000, 1),
        "load_cpu_us_per_command": round(cpu_ms["load"] * 1000, 1),
        # CPU seconds per command times commands per second.
        "cores_busy": round(cpu_ms["total"] / 1000 * per_s, 2),
    }


def one_pass(
    url: str,
    server_pid: int,
    mode: str,
    tag: str,
    sessions: int,
    per_session: int,
    gateway_runtime: bool = False,
    stages: bool = False,
) -> dict[str, Any]:
    """One mode under the load, on sessions of its own (`tag`); with `gateway_runtime`, the
    `null_lean` and `null_core` processes run as the gateway's does (`--gateway-runtime`);
    with `stages`, a gateway mode's stage profile from a second, profiled pass."""
    if mode in _GATEWAY_ARGV:
        argv = _GATEWAY_ARGV[mode]
        with running_services(url, ["gateway"], argv=argv) as services:
            pid = services["gateway"].process.pid
            result = _measure(url, mode, (pid, server_pid), tag, sessions, per_session)
        if stages:
            # Sessions of their own: the measured pass's are in this server already.
            profiled = f"{tag}-stages"
            result["stages_us_per_command"] = profiled_gateway(
                url,
                lambda: drive_injects(url, profiled, sessions, per_session),
                f"warm-{profiled}",
                argv,
            )
        return result
    flags = _NULL_FLAGS[mode] + (
        ["--gateway-runtime"] if gateway_runtime and mode in _ON_GATEWAY_RUNTIME else []
    )
    with null_gateway(url, *flags) as process:
        return _measure(url, mode, (process.pid, server_pid), tag, sessions, per_session)


def run(
    sessions: int,
    per_session: int,
    rounds: int,
    gateway_runtime: bool = False,
    modes: tuple[str, ...] = MODES,
    stages: bool = False,
) -> dict[str, Any]:
    """`rounds` rounds of each of `modes` on one fresh server, then each mode's best rate."""
    passes: list[dict[str, Any]] = []
    with embedded_server() as server:
        asyncio.run(provision_server(server.url))
        assert server.process is not None
        for number in range(rounds):
            for mode in modes:
                tag = f"{mode}-{number}"
                result = one_pass(
                    server.url,
                    server.process.pid,
                    mode,
                    tag,
                    sessions,
                    per_session,
                    gateway_runtime,
                    stages,
                )
                passes.append(result)
                print(
                    f"{mode}: {result['commands_per_s']:,.0f} commands/s, "
                    f"{result['cpu_us_per_command']} µs CPU per command "
                    f"(nats-server {result['server_cpu_us_per_command']}, load "
                    f"{result['load_cpu_us_per_command']}; {result['cores_busy']} cores busy)",
                    flush=True,
                )
    best = {mode: max(p["commands_per_s"] for p in passes if p["mode"] == mode) for mode in modes}
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
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"which modes to run, comma-separated ('null' among them): {', '.join(MODES)}",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="after each gateway mode's pass, a profiled one: its CPU per command by stage",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    modes = tuple(args.modes.split(","))
    if "null" not in modes or not set(modes) <= set(MODES):
        parser.error(f"--modes: 'null' and any of {', '.join(MODES)}")
    result = run(
        args.sessions, args.per_session, args.rounds, args.gateway_runtime, modes, args.stages
    )
    emit("gateway_floor", result, args.output)


if __name__ == "__main__":
    main()
