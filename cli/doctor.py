"""`reminders doctor`: is this deployment healthy? One row per check; non-zero on failure.

Read-only: it never creates or changes anything.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import nats
from nats.aio.client import Client
from nats.js.api import ConsumerInfo

from services.adapters.connection import CLI_CONNECT_TIMEOUT_S, NatsUnreachable, connect
from services.adapters.provisioning import (
    _contradictions,
    _needs_update,
    agent_events_stream_config,
    event_stream_config,
    side_stream_configs,
)
from services.adapters.settings import Settings
from services.workers import all_consumers

LAG_WARNING = 10_000
PROVISION_HINT = "run `reminders provision` to create it"


@dataclass(frozen=True)
class Check:
    """One row of the report."""

    name: str
    ok: bool
    detail: str


async def _stream_checks(nc: Client, settings: Settings) -> list[Check]:
    js = nc.jetstream()
    checks = []
    wanted_streams = [
        event_stream_config(settings),
        *side_stream_configs(settings),
        agent_events_stream_config(settings),
    ]
    for wanted in wanted_streams:
        name = wanted.name or ""
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            checks.append(Check(f"stream {name}", False, f"missing: {PROVISION_HINT}"))
            continue
        problems = _contradictions(info.config, wanted)
        if problems:
            checks.append(Check(f"stream {name}", False, "; ".join(problems)))
        elif _needs_update(info.config, wanted):
            checks.append(Check(f"stream {name}", False, "settings drifted from the SPEC"))
        else:
            detail = f"{info.state.messages} messages, last seq {info.state.last_seq}"
            checks.append(Check(f"stream {name}", True, detail))
    return checks


async def _bucket_check(nc: Client, settings: Settings) -> Check:
    try:
        status = await (await nc.jetstream().key_value(settings.kv_bucket)).status()
    except nats.js.errors.BucketNotFoundError:
        return Check(f"bucket {settings.kv_bucket}", False, f"missing: {PROVISION_HINT}")
    return Check(f"bucket {settings.kv_bucket}", True, f"{status.values} values")


async def _consumer_checks(nc: Client, settings: Settings) -> list[Check]:
    """Every worker's durable, as `reminders provision` makes them (every partition's,
    when the projector is partitioned)."""
    checks = []
    for consumer in all_consumers(settings):
        stream, durable = consumer.stream, consumer.name
        info = await _pulled_consumer_info(nc, stream, durable)
        if info is None:
            checks.append(Check(f"consumer {durable}", False, f"missing: {PROVISION_HINT}"))
            continue
        lag, unacked = int(info.num_pending or 0), int(info.num_ack_pending or 0)
        if not info.num_waiting and not unacked:
            detail = f"no worker is pulling (lag {lag}): is the {durable} running?"
            checks.append(Check(f"consumer {durable}", False, detail))
            continue
        detail = f"lag {lag}, unacked {unacked}"
        checks.append(Check(f"consumer {durable}", lag < LAG_WARNING, detail))
    return checks


async def _pulled_consumer_info(
    nc: Client, stream: str, durable: str, attempts: int = 6
) -> ConsumerInfo | None:
    """The consumer's info once a worker's pull request is seen waiting (a running worker
    long-polls, so one is there nearly always), or the last info read; None when missing."""
    info: ConsumerInfo | None = None
    for _ in range(attempts):
        try:
            info = await nc.jetstream().consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            return None
        if info.num_waiting:
            return info
        await asyncio.sleep(0.25)
    return info


async def _dlq_check(nc: Client, settings: Settings) -> Check:
    try:
        info = await nc.jetstream().stream_info(settings.dlq_stream)
    except nats.js.errors.NotFoundError:
        return Check("dead letters", False, f"{settings.dlq_stream} missing: {PROVISION_HINT}")
    count = int(info.state.messages)
    detail = "none" if count == 0 else f"{count} poison message(s) in {settings.dlq_stream}"
    return Check("dead letters", count == 0, detail)


async def run_checks(settings: Settings) -> list[Check]:
    """Every check, in order; a connection failure is the only row when it happens."""
    try:
        nc = await connect(
            settings, "reminders-doctor", startup_timeout_s=CLI_CONNECT_TIMEOUT_S, fail_fast=True
        )
    except NatsUnreachable as exc:
        return [Check("connectivity", False, str(exc))]
    try:
        checks = [Check("connectivity", True, settings.nats_url)]
        try:
            account = await nc.jetstream().account_info()
            checks.append(Check("jetstream", True, f"{account.streams} streams"))
        except Exception as exc:
            checks.append(Check("jetstream", False, f"not available ({type(exc).__name__})"))
            return checks
        checks += await _stream_checks(nc, settings)
        checks.append(await _bucket_check(nc, settings))
        checks += await _consumer_checks(nc, settings)
        checks.append(await _dlq_check(nc, settings))
        return checks
    finally:
        await nc.close()
