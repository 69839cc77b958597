"""Fuzzing the bus: every command op and the JSON-RPC subject, over a real nats-server,
against a real gateway (and projector) process (issue #10).

Sizes: the unmarked test sends `REMINDERS_FUZZ_INPUTS` inputs (default 200) so CI stays
fast; `pytest -m fuzz` runs the long form (default 10,000). `REMINDERS_FUZZ_SEED` picks
the seed (default 0, so a run is reproducible). Each run prints its counts; the long one writes
them to `bench/results/fuzz.json` (by op and by outcome code).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import orjson
import pytest
from nats.aio.client import Client

from services.adapters.settings import Settings
from tests.fuzz.campaign import Builder, Campaign
from tests.fuzz.inputs import Pools
from tests.processes import ServiceRunner

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "fuzz.json"


def _size(default: int) -> int:
    return int(os.environ.get("REMINDERS_FUZZ_INPUTS", default))


def _seed() -> int:
    return int(os.environ.get("REMINDERS_FUZZ_SEED", "0"))


async def _campaign(
    run: str,
    total: int,
    per_op: int,
    nc: Client,
    settings: Settings,
    services: ServiceRunner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gateway = services.start("gateway")
    projector = services.start("projector")
    started = time.perf_counter()
    pools = Pools.draw(per_op, _seed())
    inputs, scenarios = Builder(pools, _seed(), run=f"{_seed()}").build(total)
    generated = time.perf_counter() - started
    campaign = Campaign(nc, settings.stream)
    sending = await campaign.run(inputs, scenarios)
    await campaign.census()
    tally = campaign.tally
    for service in (gateway, projector):
        log = service.log()
        if "Traceback" in log or '"level":"error"' in log or '"exception"' in log:
            bad = [line for line in log.splitlines() if "error" in line or "Traceback" in line]
            tally.failures.append(f"[{service.name} log] " + "\n".join(bad[:10]))
    record = {
        "inputs": tally.sent,
        "seed": _seed(),
        "schema_examples_per_op": per_op,
        "generate_s": round(generated, 1),
        "send_and_check_s": round(sending, 1),
        "by_op": dict(sorted(tally.by_op.items())),
        "by_outcome": dict(sorted(tally.by_outcome.items())),
        "envelopes_checked": dict(sorted(tally.envelopes.items())),
        "failures": len(tally.failures),
    }
    # Only the long run is a measurement worth keeping; the short one must leave a clean tree.
    if run == "long":
        _keep(run, record)
    with capsys.disabled():
        print(
            f"\nfuzz {run}: {tally.sent} inputs sent in {sending:.1f}s "
            f"(+{generated:.1f}s generating), {len(tally.failures)} failures; "
            f"outcomes {dict(tally.by_outcome)}"
        )
    assert not tally.failures, "\n".join(tally.failures[:25])
    assert tally.sent >= total


def _keep(run: str, record: dict[str, object]) -> None:
    """Write the run's counts into `bench/results/fuzz.json`, beside earlier runs."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    RESULTS.write_text(
        orjson.dumps(
            {**previous, run: record}, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
        ).decode()
        + "\n"
    )


async def test_fuzz_every_op_and_json_rpc_short(
    nc: Client,
    provisioned: Settings,
    services: ServiceRunner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await _campaign("short", _size(200), 4, nc, provisioned, services, capsys)


@pytest.mark.fuzz
async def test_fuzz_every_op_and_json_rpc_long(
    nc: Client,
    provisioned: Settings,
    services: ServiceRunner,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await _campaign("long", _size(10_000), 60, nc, provisioned, services, capsys)
