"""The checker catches a deliberately broken build (issue #23).

Two broken gateways, built in this process only (no production code changes): a committer
that drops the last event of a few multi-event atomic batches yet answers ok, and one that
answers ok before — and without — storing a few commands. The recorded workload runs against
each, and the history checker must name the anomaly: `partial` for the first, `lost` for the
second. The same workload against the real committer is clean.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import orjson
from nats.aio.client import Client

from services.adapters.append import SessionAppend
from services.adapters.settings import Settings
from services.gateway.committer import GroupCommitter
from services.gateway.service import CommandService
from tests.faults.checker import Report, check
from tests.faults.history import History, Workload, logs_of

#: Writes only: the queries need the projector, which this in-process gateway does not run.
WRITES_MIX = {
    "inject": 40,
    "inject_queued": 6,
    "clear": 4,
    "revoke": 4,
    "render": 10,
    "end_turn": 8,
    "checkpoint": 6,
}


class DropsOneEventOfABatch(GroupCommitter):
    """Broken on purpose: the first `times` commands of ≥ 2 events lose their last event."""

    def __init__(self, nc: Client, times: int = 3) -> None:
        super().__init__(nc)
        self.left = times

    async def commit(self, append: SessionAppend, timeout_s: float | None = None) -> list[int]:
        if self.left > 0 and len(append.events) >= 2:
            self.left -= 1
            short = dataclasses.replace(
                append, events=append.events[:-1], encoded=append.encoded[:-1]
            )
            seqs = await super().commit(short, timeout_s)
            return [*seqs, seqs[-1] + 1]
        return await super().commit(append, timeout_s)


class RepliesBeforeTheAck(GroupCommitter):
    """Broken on purpose: every `every`-th command is answered as stored and never sent."""

    def __init__(self, nc: Client, every: int = 25) -> None:
        super().__init__(nc)
        self.every = every
        self.calls = 0

    async def commit(self, append: SessionAppend, timeout_s: float | None = None) -> list[int]:
        self.calls += 1
        if self.calls % self.every == 0:
            base = append.expected_last_seq + 1_000_000
            return list(range(base, base + len(append.events)))
        return await super().commit(append, timeout_s)


class InProcess:
    """A workload client that calls one in-process gateway directly."""

    def __init__(self, service: CommandService) -> None:
        self.service = service

    async def request(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        return await self.service.handle(op, orjson.dumps(payload))


async def run_against(
    nc: Client, settings: Settings, committer: GroupCommitter, out: Path
) -> Report:
    committer.start()
    service = CommandService(nc, settings, committer)
    history = History(out / "history.jsonl")
    print(f"history: {history.path}")
    sessions = [f"b{i}" for i in range(4)]
    workload = Workload(
        [InProcess(service)], history, sessions, 2, pause_s=0.0, ops_per_client=60, mix=WRITES_MIX
    )
    try:
        await asyncio.wait_for(workload.run(asyncio.Event()), timeout=120)
    finally:
        history.close()
        await committer.stop()
    logs, _ = await logs_of(nc, settings.stream)
    return check(history.ops, logs)


async def test_the_real_committer_is_clean(
    nc: Client, provisioned: Settings, tmp_path: Path
) -> None:
    report = await run_against(nc, provisioned, GroupCommitter(nc), tmp_path)
    assert report.anomalies == [], report.summary()
    assert report.counts["applied"] > 100


async def test_a_batch_that_drops_one_event_is_caught_as_partial(
    nc: Client, provisioned: Settings, tmp_path: Path
) -> None:
    report = await run_against(nc, provisioned, DropsOneEventOfABatch(nc), tmp_path)
    print(report.summary())
    assert report.by_kind().get("partial", 0) >= 1, report.summary()
    assert any("not one whole command" in a.message for a in report.anomalies)


async def test_a_reply_before_the_ack_is_caught_as_lost(
    nc: Client, provisioned: Settings, tmp_path: Path
) -> None:
    report = await run_against(nc, provisioned, RepliesBeforeTheAck(nc), tmp_path)
    print(report.summary())
    assert report.by_kind().get("lost", 0) >= 1, report.summary()
    assert any("none of its events is in the log" in a.message for a in report.anomalies)
