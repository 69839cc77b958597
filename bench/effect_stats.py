"""`stats_all`: `reminders stats --all` over an export against `reminders replay` of every
session of the same export, in the same run (SPEC §12.6: the report runs at no less than
replay's rate).

The export is the realistic interleaved traffic of `bench.traffic` (sessions' events spread
through the file in time order), written as `reminders export --all` writes it. Both sides
start from the file: replay reads it (`rows_from_file`), groups it by session and replays each
session (`replay.engine.replay`: decode and fold); stats reads it the same way and counts
(`replay.stats.effect_report`: decode and count). No NATS is involved: both are the library
code the CLI commands run over `--from FILE`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import rate
from bench.traffic import Plan, generate, interleaved
from core import canonical_json
from core.canonical import event_subject
from replay.engine import replay
from replay.source import rows_from_file
from replay.stats import effect_report, sessions_of


def write_export(plan: Plan, path: Path, workers: int | None = None) -> int:
    """Decide the plan's traffic and write it as an export in stream order; returns the event
    count."""
    traffic = generate(plan, workers)
    stream_seq = 0
    with path.open("w", encoding="utf-8") as out:
        for _, events in interleaved(traffic, plan):
            for event in events:
                stream_seq += 1
                row = {
                    **event.to_wire(),
                    "stream_seq": stream_seq,
                    "subject": event_subject(event.kind, event.session_id),
                }
                out.write(canonical_json(row) + "\n")
    return stream_seq


def _replay_all(path: Path) -> int:
    sessions = sessions_of(rows_from_file(path))
    for rows in sessions.values():
        replay(rows)
    return len(sessions)


def _stats_all(path: Path) -> int:
    sessions = sessions_of(rows_from_file(path))
    report = effect_report(list(sessions.values()))
    return report.sessions


def measure(
    sessions: int, commands_per_session: float, workers: int | None = None
) -> dict[str, Any]:
    """Time both over one export (best of two runs each, alternating, so neither side gets a
    warmer cache or a quieter machine)."""
    plan = Plan(sessions, commands_per_session)
    with tempfile.TemporaryDirectory(prefix="bench-stats-") as tmp:
        path = Path(tmp) / "export.jsonl"
        events = write_export(plan, path, workers)
        replay_s, stats_s = [], []
        counted = 0
        for _ in range(2):
            started = time.perf_counter()
            replayed = _replay_all(path)
            replay_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            counted = _stats_all(path)
            stats_s.append(time.perf_counter() - started)
        size = path.stat().st_size
    return {
        "sessions": replayed,
        "events": events,
        "export_bytes": size,
        "sessions_counted": counted,
        "replay_s": round(min(replay_s), 3),
        "stats_s": round(min(stats_s), 3),
        "replay_sessions_per_s": rate(replayed, min(replay_s)),
        "stats_sessions_per_s": rate(counted, min(stats_s)),
    }
