"""`python -m bench`: every scenario, one JSON object with each figure beside its baseline from
the same run (see bench/README.md).

    python -m bench [--quick] [--only NAME[,NAME]] [--output FILE] [size options]
    python -m bench --markdown [FILE]      # the results table of bench/README.md, from a file
    python -m bench --compare OLD.json [NEW.json]   # A/B table of two results files
    python -m bench.docs [--check]         # every figure quoted in the docs, from bench/results/
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import catch_up, effect_stats, write_path
from bench.common import RESULTS
from bench.providers_throughput import measure as providers_measure
from bench.report import SCENARIOS, figures, markdown
from bench.stages import compare
from bench.traffic import Plan

#: Sizes of a full run and of `--quick` (a smoke test: tiny, says nothing about speed).
FULL: dict[str, float] = {
    "write_sessions": 64,
    "write_commands_per_session": 50,
    "write_in_flight": 1,
    "sequential_commands": 500,
    "sessions_10k": 10_000,
    "commands_per_session_10k": 18.8,
    "sessions_100k": 100_000,
    "commands_per_session_100k": 3.3,
    "long_commands": 600,
    "visible_sessions": 4,
    "visible_commands": 300,
    "providers_events": 2000,
    "providers_sessions": 500,
    "providers_concurrency": 256,
}
QUICK: dict[str, float] = {
    **FULL,
    "write_sessions": 8,
    "write_commands_per_session": 5,
    "sequential_commands": 20,
    "sessions_10k": 100,
    "sessions_100k": 300,
    "long_commands": 30,
    "visible_commands": 20,
    "providers_events": 60,
    "providers_sessions": 10,
    "providers_concurrency": 16,
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: scenario selection, sizes, output."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    parser.add_argument("--only", default="", help=f"comma-separated: {','.join(SCENARIOS)}")
    parser.add_argument("--output", type=Path, help="results file (default bench/results/)")
    parser.add_argument(
        "--markdown",
        nargs="?",
        const=RESULTS / "bench.json",
        type=Path,
        metavar="FILE",
        help="print the Markdown table of a results file and exit",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="OLD.json [NEW.json]: print an A/B table (NEW defaults to the full run's file)",
    )
    for name, value in FULL.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=type(value), default=None, help=f"(default {value})"
        )
    return parser.parse_args(argv)


def sizes_of(args: argparse.Namespace) -> dict[str, float]:
    """The sizes in force: the full or quick ones, overridden by any given option."""
    base = QUICK if args.quick else FULL
    return {
        name: getattr(args, name) if getattr(args, name) is not None else v
        for name, v in base.items()
    }


def run(
    selected: list[str], sizes: dict[str, float], done: Callable[[dict[str, Any]], object]
) -> dict[str, dict[str, Any]]:
    """Run the selected scenarios, the big streams last; returns each one's raw result. `done` is
    called with the results so far before each step, so a long run that fails late keeps
    what it measured."""
    out: dict[str, dict[str, Any]] = {}
    n = {name: int(value) for name, value in sizes.items()}

    def step(name: str) -> None:
        done(out)
        print(f"bench: {name} …", file=sys.stderr, flush=True)

    if "write_gateway" in selected:
        step("write_gateway")
        out["write_gateway"] = write_path.write_gateway(
            n["write_sessions"], n["write_commands_per_session"], n["write_in_flight"]
        )
    if "write_all_services" in selected:
        step("write_all_services")
        out["write_all_services"] = write_path.write_all_services(
            n["write_sessions"], n["write_commands_per_session"], n["write_in_flight"]
        )
    if "sequential_latency" in selected:
        step("sequential_latency")
        out["sequential_latency"] = write_path.sequential_latency(n["sequential_commands"])
    if "inject_visible" in selected:
        step("inject_visible")
        out["inject_visible"] = write_path.inject_visible(
            n["visible_sessions"], n["visible_commands"]
        )
    if "providers" in selected:
        step("providers")
        out["providers"] = asyncio.run(
            providers_measure(
                n["providers_events"], n["providers_sessions"], n["providers_concurrency"]
            )
        )
    if "stats_all" in selected:
        step("stats_all")
        out["stats_all"] = effect_stats.measure(
            n["sessions_10k"], sizes["commands_per_session_10k"]
        )
    if "projector_10k" in selected:
        step("projector_10k")
        plan = Plan(n["sessions_10k"], sizes["commands_per_session_10k"], n["long_commands"])

        def keep(result: dict[str, Any]) -> None:
            out["projector_10k"] = result
            done(out)

        keep(catch_up.big_stream(plan, catch_up=True, locality=True, partial=keep))
    if {"projector_100k", "replay_locality", "rebuild"} & set(selected):
        step("projector_100k / replay_locality / rebuild")
        plan = Plan(n["sessions_100k"], sizes["commands_per_session_100k"], n["long_commands"])

        def share(result: dict[str, Any]) -> None:
            if "projector_100k" in selected:
                out["projector_100k"] = result
            if "replay_locality" in selected and "replay_locality_ratio" in result:
                keys = ("sessions", "events", "long_session_events", "replay_in_stream_ms")
                out["replay_locality"] = {
                    **{key: result[key] for key in keys},
                    "replay_alone_ms": result["replay_alone_ms"],
                    "replay_locality_ratio": result["replay_locality_ratio"],
                    "replay_locality_ratios": result["replay_locality_ratios"],
                }
            if "rebuild" in selected and "rebuild_events_per_s" in result:
                out["rebuild"] = {
                    **{
                        key: result[key] for key in ("sessions", "events", "raw_ordered_msgs_per_s")
                    },
                    **{key: value for key, value in result.items() if key.startswith("rebuild_")},
                }
            done(out)

        share(
            catch_up.big_stream(
                plan,
                catch_up="projector_100k" in selected,
                locality="replay_locality" in selected,
                rebuild="rebuild" in selected,
                partial=share,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run, print one JSON object, write it under bench/results/."""
    args = parse(argv)
    if args.compare:
        old_file, *rest = args.compare
        new_file = rest[0] if rest else RESULTS / "bench.json"
        old_result, new_result = (
            json.loads(f.read_text(encoding="utf-8")) for f in (old_file, new_file)
        )
        print(compare(old_result, new_result), end="")
        return 0
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text(encoding="utf-8"))), end="")
        return 0
    selected = [name.strip() for name in args.only.split(",") if name.strip()] or list(SCENARIOS)
    unknown = sorted(set(selected) - set(SCENARIOS))
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
        return 2
    sizes = sizes_of(args)
    started = time.perf_counter()
    header = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_at_start": round(os.getloadavg()[0], 1),
        "quick": args.quick,
        "scenarios": selected,
    }
    if args.output is not None:
        output = args.output
    elif args.quick:
        output = RESULTS / "bench-quick.json"
    elif selected != list(SCENARIOS):
        output = RESULTS / "bench-partial.json"
    else:
        output = RESULTS / "bench.json"
    output.parent.mkdir(parents=True, exist_ok=True)

    def results_of(scenarios: dict[str, dict[str, Any]]) -> dict[str, Any]:
        return {
            "benchmark": "bench",
            "run": {**header, "seconds": round(time.perf_counter() - started, 1)},
            "sizes": sizes,
            "figures": figures(scenarios),
            "scenarios": scenarios,
        }

    def save(scenarios: dict[str, Any]) -> str:
        text = json.dumps(results_of(scenarios), indent=2, ensure_ascii=False)
        output.write_text(text + "\n", encoding="utf-8")
        return text

    print(save(run(selected, sizes, save)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
