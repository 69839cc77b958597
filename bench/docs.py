"""Benchmark figures in the documentation, generated from `bench/results/*.json`.

Prose that quotes a benchmark holds the figures in a marked block::

    <!-- bench:begin NAME -->
    …generated text…
    <!-- bench:end -->

`python -m bench.docs` rewrites every block of the pages below from the committed results;
`python -m bench.docs --check` changes nothing and exits 1 naming each stale block
(`tests/unit/test_docs_current.py` runs the same check). So a new run's figures reach every
page at once, and no page can quote a run the results no longer hold. To quote a new figure,
add a renderer to `BLOCKS` and put its markers where the figure belongs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import markdown

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: The pages that may hold blocks, relative to the repository root.
PAGES: tuple[str, ...] = (
    "README.md",
    "bench/README.md",
    "docs/scaling.md",
    "docs/providers.md",
    "docs/testing.md",
)
BLOCK = re.compile(
    r"(?P<begin><!-- bench:begin (?P<name>[a-z0-9-]+) -->\n)"
    r"(?P<body>.*?)(?P<end><!-- bench:end -->)",
    re.DOTALL,
)

Results = Callable[[str], dict[str, Any]]


def load(name: str) -> dict[str, Any]:
    """One committed results file, `bench/results/<name>.json`."""
    data: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    return data


def _n(value: float, digits: int = 0) -> str:
    """A figure as the pages write it: thousands separated, `digits` decimals."""
    return f"{value:,.{digits}f}"


def _ratio(value: float) -> str:
    return f"{value:.2f}×"


def results_table(results: Results) -> str:
    """The table of every figure of the last full `python -m bench` run."""
    return markdown(results("bench"))


def _run_line(bench: dict[str, Any]) -> str:
    run = bench.get("run", {})
    return (
        f"`bench/results/bench.json`: {run.get('at', '?')}, {run.get('cpus', '?')} cores, "
        f"load average {run.get('load_average_at_start', '?')} at the start"
    )


def single_process(results: Results) -> str:
    """What one gateway and one projector did in the last full run (docs/scaling.md)."""
    bench = results("bench")
    s = bench["scenarios"]
    gw, every, seq = s["write_gateway"], s["write_all_services"], s["sequential_latency"]
    p10, p100 = s["projector_10k"], s["projector_100k"]
    rows = [
        "| what | figure (same-run baseline) | measured by |",
        "|---|---|---|",
        f"| event size | {_n(p10['mean_event_bytes'])} B on average (10k-session log), "
        f"{_n(p100['mean_event_bytes'])} B (100k-session log); an `injected` event carries the "
        "full spec, a `delivered` one the envelope text | `python -m bench` |",
        f"| one gateway, {gw['sessions']} sessions in parallel, each inject `deduped` + "
        f"`injected` | {_n(gw['commands_per_s'])} commands/s (raw publish with the "
        f"expected-sequence headers: {_n(gw['occ_plain_publish_per_s'])} messages/s) "
        "| `python -m bench --only write_gateway` |",
        f"| the same with every service running | {_n(every['commands_per_s'])} commands/s; "
        f"the projector was {every['projector_caught_up_after_last_reply_s']:g} s behind the "
        "last reply | `--only write_all_services` |",
        f"| one session, one inject after another | p50 {seq['inject_p50_ms']:g} ms (one raw "
        f"single-message atomic batch: {seq['raw_atomic_batch_p50_ms']:g} ms) "
        "| `--only sequential_latency` |",
        f"| one projector catching up, {_n(p10['sessions'])} sessions interleaved "
        f"({_n(p10['events'])} events) | {_n(p10['projector_events_per_s'])} events/s (raw "
        f"fetch(1000)+ack: {_n(p10['raw_fetch_ack_msgs_per_s'])} messages/s) "
        "| `--only projector_10k` |",
        f"| the same, {_n(p100['sessions'])} sessions ({_n(p100['events'])} events) "
        f"| {_n(p100['projector_events_per_s'])} events/s (raw: "
        f"{_n(p100['raw_fetch_ack_msgs_per_s'])}/s), peak RSS "
        f"{p100['projector_peak_rss_mib']:g} MiB with the default cache "
        "| `--only projector_100k` |",
    ]
    return "\n".join(rows) + f"\n\nFrom {_run_line(bench)}.\n"


def not_met(results: Results) -> str:
    """Every figure of the last full run that missed its target, one line each."""
    bench = results("bench")
    lines = []
    for row in bench["figures"].values():
        if row["met"]:
            continue
        against = (
            f" against {row['baseline_what']} {_n(row['baseline'])}, {_ratio(row['ratio'])}"
            if row["baseline"] is not None
            else ""
        )
        lines.append(
            f"- {row['what']}: {row['value']:,g} {row['unit']}{against} (target {row['target']})"
        )
    return "\n".join(lines) + f"\n\nFrom {_run_line(bench)}.\n"


def gateway_messages(results: Results) -> str:
    """What the messages SPEC §3.4 asks of a gateway leave of the null gateway, in the last
    full run (`write_gateway`'s null gateway with `--atomic`)."""
    bench = results("bench")
    gw = bench["scenarios"]["write_gateway"]
    if "null_atomic_gateway_per_s" not in gw:
        return "Not measured in the last full run.\n"
    null, atomic, occ = (
        gw["null_gateway_per_s"],
        gw["null_atomic_gateway_per_s"],
        gw["occ_plain_publish_per_s"],
    )
    return (
        f"In the last full run the null gateway served {_n(null)} commands/s with one plain "
        f"publish each ({_n(gw['null_gateway_cpu_us_per_command'], 1)} µs of CPU per command). "
        "The same process sending what SPEC §3.4 asks of a gateway instead, each command's "
        "events group-committed into atomic batches and nothing decided "
        f"(`null_gateway --atomic`), served {_n(atomic)} commands/s "
        f"({_n(gw['null_atomic_gateway_cpu_us_per_command'], 1)} µs): "
        f"{_ratio(atomic / null)} of the null gateway and {_ratio(atomic / occ)} of the OCC "
        f"plain publish ({_n(occ)} messages/s). The gateway served "
        f"{_n(gw['commands_per_s'])}, {_ratio(gw['commands_per_s'] / atomic)} of it.\n\n"
        f"From {_run_line(bench)}.\n"
    )


def providers_rate(results: Results) -> str:
    """One sentence: the providers' rate against the gateway's `evaluate` rate."""
    bench = results("bench")
    p = bench["scenarios"]["providers"]
    return (
        f"In the last full run ({_run_line(bench)}; {_n(p['events'])} `session_idle` events "
        f"over {_n(p['sessions'])} sessions): {_n(p['runtime_events_per_s'])} runtime events/s "
        f"from publish to `provider_evaluated` stored, against "
        f"{_n(p['gateway_evaluate_commands_per_s'])} single-evaluation `evaluate` commands/s "
        f"sent straight to the gateway — {_ratio(p['ratio'])}; the CPU totals below predict "
        f"{_ratio(p['cpu_bound_ratio'])}. The target is the providers process's own CPU per "
        f"runtime event, {p['cpu_ms_per_runtime_event']['providers']:g} ms (≤ 0.25 ms); the "
        f"ratio, set by every process sharing the cores, is no longer one.\n"
    )


def providers_cpu(results: Results) -> str:
    """CPU milliseconds of every process per `evaluate` and per runtime event."""
    p = results("bench")["scenarios"]["providers"]
    direct, runtime = p["cpu_ms_per_evaluate_command"], p["cpu_ms_per_runtime_event"]
    columns = ("gateway", "projector", "providers", "nats-server", "load", "total")

    def row(what: str, cpu: dict[str, float]) -> str:
        cells = [f"{cpu[c]:.2f}" if cpu.get(c) else "—" for c in columns]
        return f"| {what} | {' | '.join(cells)} |"

    return (
        "\n".join(
            [
                f"| CPU ms per unit | {' | '.join(columns)} |",
                "|---|" + "---|" * len(columns),
                row("per `evaluate` sent straight to the gateway", direct),
                row("per runtime event through the providers", runtime),
            ]
            + (
                [
                    row(
                        "per runtime event through the null providers (messaging alone)",
                        p["cpu_ms_per_runtime_event_null_providers"],
                    )
                ]
                if "cpu_ms_per_runtime_event_null_providers" in p
                else []
            )
        )
        + "\n"
    )


def replay_locality(results: Results) -> str:
    """The long session read inside the 100k-session stream against alone."""
    s = results("bench")["scenarios"]
    big, small = s["replay_locality"], s["projector_10k"]
    return (
        f"In the last full run a {_n(big['long_session_events'])}-event session among "
        f"{_n(big['sessions'])} others was read and replayed in {big['replay_in_stream_ms']:g} ms "
        f"against {big['replay_alone_ms']:g} ms alone ({_ratio(big['replay_locality_ratio'])}); "
        f"among {_n(small['sessions'])}, {_ratio(small['replay_locality_ratio'])}; the "
        "difference is the reader's CPU for one direct get per event where the session alone "
        "takes two batched ones (`bench/results/replay_walk_ab.json`).\n"
    )


def partitioned(results: Results) -> str:
    """One projector against partitioned and filtering layouts on one interleaved log."""
    r = results("partitioned_projection")
    names = {
        "single": "one projector",
        "partitions_2": "view, 2 partitions",
        "partitions_4": "view, 4 partitions",
        "filtering_2": "option (b), 2 processes reading everything",
        "filtering_4": "option (b), 4 processes reading everything",
    }
    rows = ["| layout | events/s | × one projector |", "|---|---|---|"]
    for key, what in names.items():
        layout = r["layouts"].get(key)
        if layout is not None:
            rows.append(
                f"| {what} | {_n(layout['catch_up_events_per_s'])} "
                f"| {layout['speedup_vs_single']:.2f} |"
            )
    sourcing = [
        layout["sourcing_events_per_s"]
        for layout in r["layouts"].values()
        if "sourcing_events_per_s" in layout
    ]
    if sourcing:
        rows.append(
            f"| sourcing `REMINDERS` into the view | {_n(min(sourcing))}–{_n(max(sourcing))} | |"
        )
    return "\n".join(rows) + (
        f"\n\n`bench/results/partitioned_projection.json`: {r['at']}, {r['cpus']} cores shared "
        f"with other runs, {_n(r['sessions'])} sessions × {r['turns_per_session']} turns, "
        f"{_n(r['events'])} events.\n"
    )


def _kills(scenario: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for kill in scenario["kills"]:
        what = "stream leader" if kill["what"].startswith("stream leader") else kill["what"]
        counts[what] = counts.get(what, 0) + 1
    return ", ".join(f"{n} × {what}" for what, n in counts.items())


def faults(results: Results) -> str:
    """What the long fault run recorded, per scenario."""
    r = results("faults")["scenarios"]
    parts = []
    for name, what in (("single_node_r1", "single node"), ("cluster_r3", "cluster")):
        s = r[name]
        outcomes = ", ".join(
            f"{n:,} `{code}`" for code, n in sorted(s["outcomes"].items()) if code != "ok"
        )
        parts.append(
            f"{what}, {len(s['kills'])} kills ({_kills(s)}) — {s['commands']:,} commands, "
            f"{s['acked']:,} acked, {outcomes or 'nothing else'}, lost {s['lost']}, "
            f"duplicated {s['duplicated']}, longest time without an ack "
            f"{s['longest_without_ack_s']:.1f} s"
        )
    text = "Measured here (long form, `bench/results/faults.json`): " + "; ".join(parts) + "."
    before = results("faults").get("before_fix", {}).get("cluster_r3")
    if before is not None:
        conflicts = [kill["next_5s"].get("conflict", 0) for kill in before["kills"]]
        text += (
            f" Before the gateway fix the same cluster run answered "
            f"{before['outcomes'].get('conflict', 0)} commands `conflict` "
            f"({' and '.join(str(n) for n in conflicts)} in the 5 s after each kill) with "
            f"{before['longest_without_ack_s']:.1f} s without an ack."
        )
    return text + "\n"


def fuzz(results: Results) -> str:
    """The size and timing of the last short and long fuzz runs."""
    r = results("fuzz")
    short, long = r["short"], r["long"]
    return (
        f"The last runs (`bench/results/fuzz.json`): short, {short['inputs']:,} inputs, "
        f"{short['generate_s']:g} s drawing and {short['send_and_check_s']:g} s sending; long, "
        f"{long['inputs']:,} inputs, {long['generate_s']:g} s drawing and "
        f"{long['send_and_check_s']:g} s sending; {short['failures'] + long['failures']} "
        "failures.\n"
    )


BLOCKS: dict[str, Callable[[Results], str]] = {
    "results": results_table,
    "single-process": single_process,
    "not-met": not_met,
    "gateway-messages": gateway_messages,
    "providers-rate": providers_rate,
    "providers-cpu": providers_cpu,
    "replay-locality": replay_locality,
    "partitioned": partitioned,
    "faults": faults,
    "fuzz": fuzz,
}


def render_page(text: str, results: Results, where: str = "") -> str:
    """The page with every block regenerated; an unknown block name is an error."""

    def block(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise KeyError(f"{where}: unknown bench block {name!r} (known: {', '.join(BLOCKS)})")
        return f"{match['begin']}{BLOCKS[name](results)}{match['end']}"

    return BLOCK.sub(block, text)


def stale_blocks(root: Path = ROOT, results: Results = load) -> list[str]:
    """`page: block` for every block whose text differs from what the results give."""
    stale = []
    for page in PAGES:
        text = (root / page).read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            if render_page(match[0], results, page) != match[0]:
                stale.append(f"{page}: {match['name']}")
    return stale


def used_blocks(root: Path = ROOT) -> dict[str, list[str]]:
    """Block name → the pages that hold it."""
    used: dict[str, list[str]] = {}
    for page in PAGES:
        for match in BLOCK.finditer((root / page).read_text(encoding="utf-8")):
            used.setdefault(match["name"], []).append(page)
    return used


def write_pages(root: Path = ROOT, results: Results = load) -> list[str]:
    """Regenerate every block in place; the pages that changed."""
    changed = []
    for page in PAGES:
        path = root / page
        text = path.read_text(encoding="utf-8")
        new = render_page(text, results, page)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.docs [--check]`."""
    parser = argparse.ArgumentParser(prog="python -m bench.docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_blocks()
        for name in stale:
            print(f"stale: {name} (run `python -m bench.docs`)", file=sys.stderr)
        return 1 if stale else 0
    for page in write_pages():
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
