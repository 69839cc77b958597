"""The figures `python -m bench` reports: each measured value beside its baseline from the same
run, the ratio and the target; and the Markdown table bench/README.md shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    """How one reported figure is read out of a scenario's raw result."""

    key: str
    scenario: str
    what: str
    unit: str
    value: str
    target: float
    #: "ratio": the target bounds value/baseline; "value": it bounds the value itself.
    target_of: str
    #: ">=": more is better; "<=": less is better.
    op: str
    baseline: str | None = None
    baseline_what: str = ""
    #: The scenario the baseline is read from, when not the figure's own (the gateway with
    #: every service is set against the gateway alone, measured minutes before it).
    baseline_scenario: str | None = None

    def target_text(self) -> str:
        """The target as the results table writes it."""
        sign = "≥" if self.op == ">=" else "≤"
        if self.target_of == "ratio":
            return f"{sign} {self.target:g}× baseline"
        return f"{sign} {self.target:g} {self.unit}"


FIGURES: tuple[Figure, ...] = (
    Figure(
        "write_gateway",
        "write_gateway",
        "commands/s, sessions in parallel, gateway alone",
        "commands/s",
        "commands_per_s",
        0.25,
        "ratio",
        ">=",
        "occ_plain_publish_per_s",
        "OCC plain publish, msgs/s",
    ),
    Figure(
        "write_gateway_vs_null",
        "write_gateway",
        "same, against the null gateway (one publish with the expectation, ack, reply)",
        "commands/s",
        "commands_per_s",
        0.5,
        "ratio",
        ">=",
        "null_gateway_per_s",
        "null gateway, commands/s",
    ),
    Figure(
        "write_all_services",
        "write_all_services",
        "same, with every service running (projector caught up ≤ 1 s after the last reply)",
        "commands/s",
        "commands_per_s",
        0.6,
        "ratio",
        ">=",
        "commands_per_s",
        "the gateway alone, commands/s",
        baseline_scenario="write_gateway",
    ),
    Figure(
        "sequential_inject_p50",
        "sequential_latency",
        "one session, sequential: inject latency p50",
        "ms",
        "inject_p50_ms",
        1.3,
        "ratio",
        "<=",
        "raw_atomic_batch_p50_ms",
        "one atomic batch p50, ms",
    ),
    Figure(
        "projector_catch_up_10k",
        "projector_10k",
        "projector catch-up, 10k sessions, interleaved",
        "events/s",
        "projector_events_per_s",
        1.0,
        "ratio",
        ">=",
        "raw_fetch_ack_msgs_per_s",
        "fetch+ack, msgs/s",
    ),
    Figure(
        "projector_verify_10k",
        "projector_10k",
        "projection equal to a replay after the 10k catch-up (mismatches)",
        "sessions",
        "verify_mismatches",
        0,
        "value",
        "<=",
    ),
    Figure(
        "projector_catch_up_100k",
        "projector_100k",
        "projector catch-up, 100k sessions, interleaved",
        "events/s",
        "projector_events_per_s",
        0.6,
        "ratio",
        ">=",
        "raw_fetch_ack_msgs_per_s",
        "fetch+ack, msgs/s",
    ),
    Figure(
        "projector_peak_rss_100k",
        "projector_100k",
        "projector peak RSS at 100k sessions",
        "MiB",
        "projector_peak_rss_mib",
        250,
        "value",
        "<=",
    ),
    Figure(
        "projector_verify_100k",
        "projector_100k",
        "projection equal to a replay after the 100k catch-up (mismatches)",
        "sessions",
        "verify_mismatches",
        0,
        "value",
        "<=",
    ),
    Figure(
        "verify_projection_100k",
        "projector_100k",
        "`verify-projection --all` over the 100k-session stream",
        "events/s",
        "verify_events_per_s",
        0.5,
        "ratio",
        ">=",
        "raw_ordered_msgs_per_s",
        "raw ordered read, msgs/s",
    ),
    Figure(
        "replay_locality",
        "replay_locality",
        "replay of the long session inside the 100k-session stream vs alone, worst of 3 rounds",
        "ms",
        "replay_in_stream_ms",
        1.2,
        "ratio",
        "<=",
        "replay_alone_ms",
        "same session alone, ms",
    ),
    Figure(
        "inject_visible_p99",
        "inject_visible",
        "inject → visible in `state` (`min_seq`), p99, light load",
        "ms",
        "visible_p99_ms",
        10,
        "value",
        "<=",
        "raw_atomic_batch_p99_ms",
        "one atomic batch (synced commit), p99, ms",
    ),
    Figure(
        "stats_all",
        "stats_all",
        "`reminders stats --all` over a 10k-session export vs replay of every session of it",
        "sessions/s",
        "stats_sessions_per_s",
        1.0,
        "ratio",
        ">=",
        "replay_sessions_per_s",
        "replay of every session, sessions/s",
    ),
    Figure(
        "providers_cpu",
        "providers",
        "providers: CPU of the providers process per runtime event",
        "ms",
        "cpu_ms_per_runtime_event.providers",
        0.25,
        "value",
        "<=",
    ),
    Figure(
        "rebuild",
        "rebuild",
        "`reminders rebuild` of the 100k-session stream",
        "events/s",
        "rebuild_events_per_s",
        0.6,
        "ratio",
        ">=",
        "raw_ordered_msgs_per_s",
        "raw ordered read, msgs/s",
    ),
    Figure(
        "rebuild_peak_rss",
        "rebuild",
        "`reminders rebuild` peak RSS (whatever the stream's size)",
        "MiB",
        "rebuild_peak_rss_mib",
        300,
        "value",
        "<=",
    ),
)

SCENARIOS: tuple[str, ...] = tuple(dict.fromkeys(figure.scenario for figure in FIGURES))


def _met(figure: Figure, value: float, ratio: float | None) -> bool:
    measured = ratio if figure.target_of == "ratio" else value
    if measured is None:
        return False
    return measured >= figure.target if figure.op == ">=" else measured <= figure.target


def extra_condition(figure: Figure, result: dict[str, Any]) -> bool:
    """A figure's condition beyond its target (the projector keeping up with the writes)."""
    if figure.key == "write_all_services":
        return float(result.get("projector_caught_up_after_last_reply_s", 1e9)) <= 1.0
    return True


def _lookup(result: dict[str, Any], path: str) -> Any:
    """The value at a dotted `path` of a scenario's result (None when it is not there)."""
    value: Any = result
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def figures(scenarios: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every figure whose scenario ran: value, baseline, ratio, target and whether it is met."""
    out: dict[str, dict[str, Any]] = {}
    for figure in FIGURES:
        result = scenarios.get(figure.scenario)
        # A scenario stopped part way reports the parts it finished.
        if result is None or _lookup(result, figure.value) is None:
            continue
        value = float(_lookup(result, figure.value))
        source = scenarios.get(figure.baseline_scenario or figure.scenario) or {}
        baseline = float(source.get(figure.baseline, 0.0)) if figure.baseline else None
        ratio = round(value / baseline, 2) if baseline else None
        out[figure.key] = {
            "what": figure.what,
            "unit": figure.unit,
            "value": value,
            "baseline": baseline,
            "baseline_what": figure.baseline_what or None,
            "ratio": ratio,
            "target": figure.target_text(),
            "met": _met(figure, value, ratio) and extra_condition(figure, result),
        }
    return out


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:g}"


def markdown(results: dict[str, Any]) -> str:
    """The results table of bench/README.md (and `bench.docs`) from a results file."""
    lines = [
        "| what | baseline (same run) | ours | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for figure in FIGURES:
        row = results.get("figures", {}).get(figure.key)
        if row is None:
            lines.append(
                f"| {figure.what} | — | not measured in this run | — | {figure.target_text()} | — |"
            )
            continue
        baseline = (
            f"{row['baseline_what']}: {_number(row['baseline'])}"
            if row["baseline"] is not None
            else "—"
        )
        ratio = f"{row['ratio']:g}×" if row["ratio"] is not None else "—"
        lines.append(
            f"| {row['what']} | {baseline} | {_number(row['value'])} {row['unit']} | {ratio} "
            f"| {row['target']} | {'yes' if row['met'] else 'no'} |"
        )
    sizes = []
    for name in ("projector_10k", "projector_100k"):
        scenario = results.get("scenarios", {}).get(name)
        if scenario:
            sizes.append(
                f"{name}: {scenario['sessions']:,} sessions, {scenario['events']:,} events of "
                f"{scenario['mean_event_bytes']} bytes on average"
            )
    run = results.get("run", {})
    lines.append("")
    merged = results.get("merged_runs", [])
    later = {name for part in merged for name in part.get("scenarios", [])}
    own = [name for name in results.get("scenarios", {}) if name not in later]
    runs = [{**run, "scenarios": own}, *merged]
    when = " and ".join(
        f"{part.get('at', '?')} (load average {part.get('load_average_at_start', '?')} at the "
        f"start, {', '.join(part.get('scenarios', []))})"
        for part in runs
    )
    lines.append(
        f"Measured on {run.get('cpus', '?')} cores, {when}"
        + (f"; {'; '.join(sizes)}" if sizes else "")
        + "."
    )
    return "\n".join(lines) + "\n"
