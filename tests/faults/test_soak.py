"""The soak (`pytest -m soak`, issue #23): 30 minutes of mixed load on the proxied R3 cluster
with a fault every minute (the cluster nemeses in turn: isolate the leader, a 2/1 split,
SIGSTOP of the leader, kill -9 of the leader and of a follower), the recorded history checked
at the end (zero anomalies), and the resident memory of every service sampled every 10 s:
after warm-up each stays within 10 % (the curve is printed). Warm-up lasts at least the first
fifth of the run, and until every service's session cache is full
(`reminders_session_cache_bytes` against its bound, scraped with each sample): a service's
memory grows while its cache fills, by design, and only the curve after that shows a leak.

Service processes are not killed here, so each memory curve is one process's. Shorter runs:
`REMINDERS_SOAK_S` (default 1800) and `REMINDERS_SOAK_FAULT_EVERY_S` (default 60).

The services' session caches are bounded here (`SOAK_CACHE_BYTES`) far below their
defaults (32 MiB of encoded state in a gateway, 16 MiB in the projector). What they cache
grows with the sessions the run creates: every handoff makes a child session, touched once
and never again (about 1.4 a second, about 4 KiB encoded each and about six times that as
Python objects). At the defaults no cache fills within 30 minutes, so the curve after
warm-up would be the caches filling towards bounds they never reach, and prove nothing
about flatness. At these bounds each cache fills within the first half of the run, and the
curve after it shows whether anything else grows. The bounds must still hold the 12
sessions the clients keep using, or the services read each of them again on every command
and batch, whole, and the curve is those reads. Their states grow with their history: ids
of every reminder seen and fired, the last 256 replies, and the delivered history until a
`compact` clears it. Measured on a run without `compact` in the mix, 265 KiB each after 11
minutes (114 KiB of it delivered history): 8.5 MiB for the 12 after 30 minutes, past any
bound that still fills. The workload compacts now and then (`history.MIX`), as an agent
does; that clears the delivered history only: with it, the 12 were still about 200 KiB each
after 700 s of the 30-minute soak (the ids seen and fired grow for the session's life), so
about 5 MiB by its end, close to these bounds.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from services.adapters.settings import Settings
from tests.faults.nemesis import ProxiedCluster
from tests.faults.runs import (
    NEMESES,
    Ctx,
    RunShape,
    cache_evictions,
    cache_fill,
    provisioned,
    rss_mib,
    run_checked,
)

#: The services' session cache bounds in this run, in bytes of encoded state; see the
#: module docstring.
SOAK_CACHE_BYTES = {
    "REMINDERS_GATEWAY_CACHE_BYTES": 6 * 1024 * 1024,
    "REMINDERS_PROJECTOR_CACHE_BYTES": 6 * 1024 * 1024,
}
CLUSTER_NEMESES = ["isolate_leader", "split", "pause_leader", "kill_leader", "kill_follower"]


@pytest.mark.soak
async def test_soak(
    proxied: ProxiedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable, bound in SOAK_CACHE_BYTES.items():
        monkeypatch.setenv(variable, str(bound))  # the service processes inherit it
    settings = Settings.from_env({}, nats_url=proxied.url, replicas=3)
    await provisioned(settings)
    duration = float(os.environ.get("REMINDERS_SOAK_S", "1800"))
    every = float(os.environ.get("REMINDERS_SOAK_FAULT_EVERY_S", "60"))
    samples: list[tuple[float, dict[str, float]]] = []
    fills: list[dict[str, float]] = []
    #: Each service's cache evictions so far: a cache that has evicted is full.
    evicted: list[dict[str, float]] = []
    #: Each service's reads of a session from the log so far, by how (a whole read holds the
    #: session's history at once: the curve shows whether memory moves with them).
    reads: list[dict[str, float]] = []
    turn = 0

    async def nemesis(ctx: Ctx) -> None:
        nonlocal turn
        started = time.monotonic()
        await NEMESES[CLUSTER_NEMESES[turn % len(CLUSTER_NEMESES)]](ctx)
        turn += 1
        await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))

    async def watch(ctx: Ctx) -> None:
        while True:
            row = {label: rss_mib(pid) for label, pid in ctx.services.pids().items()}
            scraped = await asyncio.to_thread(ctx.services.scrape)
            samples.append((ctx.history.now(), {k: v for k, v in row.items() if v is not None}))
            fills.append(cache_fill(scraped))
            evicted.append(cache_evictions(scraped))
            reads.append(
                {
                    f"{label}_{name.split('how=')[1].rstrip('}')}": value
                    for label, metrics in scraped.items()
                    for name, value in metrics.items()
                    if name.startswith("reminders_session_reads_total{")
                }
            )
            await asyncio.sleep(10.0)

    shape = RunShape(sessions=12, warmup_s=5.0, quiet_s=0.0, max_s=duration, pause_s=0.05)
    try:
        report, history, _ = await run_checked(
            proxied, settings, tmp_path / "run", shape, nemesis, watch
        )
    finally:
        # Printed whatever the end: a run that fails its check still shows its memory.
        curve = [
            {"t": round(t, 1), **{k: round(v, 1) for k, v in row.items()}}
            | {f"{k}_cache_fill": round(v, 2) for k, v in fill.items()}
            | {f"{k}_evictions": v for k, v in gone.items()}
            | {f"{k}_reads": v for k, v in read.items()}
            for (t, row), fill, gone, read in zip(samples, fills, evicted, reads, strict=True)
        ]
        print("rss_mib curve:", json.dumps(curve))
    assert report.anomalies == [], f"history {history.path}\n{report.summary()}"
    caches = set().union(*fills)
    assert {"gateway-a", "projector-a"} <= caches, f"no cache gauge scraped: {caches}"
    start = warmed_up(fills, evicted)
    warm = samples[start:]
    assert len(warm) >= 3, f"too short to judge memory: caches full only from sample {start}"
    for label in warm[0][1]:
        values = [row[label] for _, row in warm if label in row]
        assert max(values) <= 1.10 * min(values), f"{label} RSS not flat: {values}"


#: A cache this full is full: its LRU evicts the oldest state once the next one would pass
#: the bound, so it stays within one state's size of it.
FULL = 0.9


def warmed_up(fills: list[dict[str, float]], evicted: list[dict[str, float]]) -> int:
    """The first sample after warm-up: past the first fifth of the run, and from the first
    sample on which every service's session cache was full and stayed so (a service's memory
    grows while its cache fills; `reminders_session_cache_bytes`). Full means it has begun
    to evict (`reminders_session_cache_evictions_total`): a cache at 93 % of its bound may
    still be filling, as one soak's projector was, whose memory stepped up then and never
    moved again."""
    start = len(fills) // 5
    caches: set[str] = set().union(*fills)
    for index in range(len(fills) - 1, -1, -1):
        fill, gone = fills[index], evicted[index]
        full = caches <= fill.keys() and min(fill[label] for label in caches) >= FULL
        if not full or not all(gone.get(label, 0) > 0 for label in caches):
            return max(start, index + 1)
    return start
