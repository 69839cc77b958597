"""CPU per unit of work by stage, from a service's stage profile
(`services.adapters.stages`, written when `REMINDERS_STAGE_PROFILE` names a file), and the
A/B table of `python -m bench --compare OLD.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The projector's stages as the bench reports them: each a name and how it is computed
#: from the profile's seconds (`+`/`-` of recorded stages; `process` is the process's CPU).
PROJECTOR_STAGES: tuple[tuple[str, str], ...] = (
    ("receive", "receive"),
    ("parse", "parse"),
    ("validate_chain_fold", "validate_chain_fold"),
    ("encode", "encode"),
    ("ack", "ack"),
    ("kv_and_scheduling", "batch - parse - validate_chain_fold - encode - ack"),
    ("gc", "gc"),
    ("other", "process - receive - batch - gc"),
    ("total", "process"),
)

#: The gateway's stages, per command (bench/README.md explains each column).
GATEWAY_STAGES: tuple[tuple[str, str], ...] = (
    ("nats_read", "nats_read"),
    ("receive", "receive"),
    ("decode_validate", "decode_validate"),
    ("session", "session_cached + session_read"),
    ("decide", "decide"),
    ("batch_publish", "batch_publish"),
    ("batch_settle", "batch_settle"),
    ("fold", "fold"),
    ("reply", "reply"),
    ("nats_write", "nats_write"),
    ("gc", "gc"),
    (
        "other",
        "process - nats_read - receive - decode_validate - session_cached - session_read"
        " - decide - batch_publish - batch_settle - fold - reply - nats_write - gc",
    ),
    ("total", "process"),
)

#: What each stage column means (bench/README.md explains them at more length).
STAGE_MEANING: dict[str, str] = {
    "receive": "the fetch: pull request, messages in, wrapped",
    "parse": "orjson parse of each body",
    "validate_chain_fold": "the core: pydantic validation, the chain check, the fold",
    "encode": "the state's canonical bytes for the bucket",
    "ack": "one ack per message",
    "kv_and_scheduling": "KV reads and compare-and-set writes, with asyncio around them",
    "gc": "the garbage collector, wherever it ran (no bracket counts it)",
    "other": "telemetry, the loop, start-up",
    "total": "the process's CPU time",
}


def _evaluate(expression: str, seconds: dict[str, float]) -> float:
    total = 0.0
    sign = 1.0
    for token in expression.split():
        if token in "+-":
            sign = 1.0 if token == "+" else -1.0
            continue
        total += sign * seconds.get(token, 0.0)
    return total


def snapshot(path: Path) -> dict[str, Any]:
    """A profile file as it is now (empty when there is none): its seconds per stage
    (`process` the process's CPU) and its units."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    seconds = {**data.get("seconds", {}), "process": float(data.get("process_cpu_s", 0.0))}
    return {"seconds": seconds, "units": data.get("units", {})}


def stage_profile(
    path: Path,
    unit: str,
    layout: tuple[tuple[str, str], ...],
    since: dict[str, Any] | None = None,
) -> dict[str, float]:
    """µs of CPU per `unit` for each stage of `layout`, over the whole life of the process or,
    given an earlier `snapshot` of the same file, over what was added since; empty when there
    is no profile."""
    after = snapshot(path)
    if not after:
        return {}
    before = since or {"seconds": {}, "units": {}}
    count = int(after["units"].get(unit, 0)) - int(before["units"].get(unit, 0))
    if count <= 0:
        return {}
    seconds = {
        stage: value - before["seconds"].get(stage, 0.0)
        for stage, value in after["seconds"].items()
    }
    return {
        name: round(_evaluate(expression, seconds) / count * 1e6, 1) for name, expression in layout
    }


def _number(value: Any) -> str:
    if isinstance(value, int | float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return "—"


def _change(old: Any, new: Any) -> str:
    if isinstance(old, int | float) and isinstance(new, int | float) and old:
        return f"{(new - old) / old * 100:+.0f} %"
    return "—"


def compare(old: dict[str, Any], new: dict[str, Any]) -> str:
    """A Markdown A/B table of two results files: every figure (value and ratio), then every
    stage profile (µs of CPU per unit) in either."""
    lines = [
        f"A: {old.get('run', {}).get('at', '?')}  B: {new.get('run', {}).get('at', '?')}",
        "",
        "| figure | A | B | change | A ratio | B ratio |",
        "|---|---|---|---|---|---|",
    ]
    old_figures, new_figures = old.get("figures", {}), new.get("figures", {})
    for key in [*new_figures, *(k for k in old_figures if k not in new_figures)]:
        a, b = old_figures.get(key, {}), new_figures.get(key, {})
        what = b.get("what") or a.get("what") or key
        lines.append(
            f"| {what} | {_number(a.get('value'))} | {_number(b.get('value'))} | "
            f"{_change(a.get('value'), b.get('value'))} | {_number(a.get('ratio'))} | "
            f"{_number(b.get('ratio'))} |"
        )
    for scenario, field in _profiles(old, new):
        a = old.get("scenarios", {}).get(scenario, {}).get(field, {})
        b = new.get("scenarios", {}).get(scenario, {}).get(field, {})
        lines += ["", f"{scenario} `{field}` (µs of CPU)", "", "| stage | A | B | change |"]
        lines.append("|---|---|---|---|")
        for stage in [*b, *(s for s in a if s not in b)]:
            lines.append(
                f"| {stage} | {_number(a.get(stage))} | {_number(b.get(stage))} | "
                f"{_change(a.get(stage), b.get(stage))} |"
            )
    return "\n".join(lines) + "\n"


def _profiles(*results: dict[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for result in results:
        for scenario, raw in result.get("scenarios", {}).items():
            for field in raw if isinstance(raw, dict) else {}:
                profile = "_stages_us" in field
                if profile and (scenario, field) not in found:
                    found.append((scenario, field))
    return found
