"""SPEC §3.1: streams are created or updated idempotently; contradictions refuse to start."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, RetentionPolicy, StorageType, StreamConfig

from services.adapters.provisioning import (
    ProvisionError,
    ensure_bucket,
    event_stream_config,
    provision,
)
from services.adapters.settings import Settings
from tests.processes import ServiceRunner


async def test_provisioning_creates_the_streams_the_spec_describes(
    nc: Client, settings: Settings
) -> None:
    done = await provision(nc.jetstream(), settings)
    assert done == {
        "REMINDERS": "created",
        "REMINDERS_DLQ": "created",
        "REMINDERS_AUDIT": "created",
        "KV_REMINDER_SESSIONS": "created",
        "AGENT_EVENTS": "created",
    }
    config = (await nc.jetstream().stream_info("REMINDERS")).config
    assert config.subjects == ["transcript.reminder.>"]
    assert config.storage == StorageType.FILE
    assert config.allow_atomic is True
    assert config.allow_direct is True
    assert config.deny_delete is True
    assert not config.deny_purge
    assert config.duplicate_window == 120
    assert config.num_replicas == 1
    dlq = (await nc.jetstream().stream_info("REMINDERS_DLQ")).config
    assert dlq.subjects == ["reminders.dlq.>"]
    audit = (await nc.jetstream().stream_info("REMINDERS_AUDIT")).config
    assert audit.subjects == ["reminders.audit.>"]
    # The providers' runtime events (SPEC §9.1): file storage, limits retention, 7 days.
    agent = (await nc.jetstream().stream_info("AGENT_EVENTS")).config
    assert agent.subjects == ["agent.events.>"]
    assert agent.storage == StorageType.FILE
    assert agent.retention == RetentionPolicy.LIMITS
    assert agent.max_age == 7 * 24 * 3600
    # Every reader takes one key of the projection bucket with a direct get; the projector
    # writes a round of sessions as one atomic batch.
    bucket = (await nc.jetstream().stream_info("KV_REMINDER_SESSIONS")).config
    assert bucket.allow_direct is True and bucket.allow_atomic is True


async def test_provisioning_twice_changes_nothing(nc: Client, settings: Settings) -> None:
    await provision(nc.jetstream(), settings)
    assert set((await provision(nc.jetstream(), settings)).values()) == {"unchanged"}


async def test_an_existing_stream_missing_atomic_batches_is_updated(
    nc: Client, settings: Settings
) -> None:
    js = nc.jetstream()
    await js.add_stream(
        event_stream_config(settings).evolve(allow_atomic=False, duplicate_window=30)
    )
    assert (await provision(js, settings))["REMINDERS"] == "updated"
    config = (await js.stream_info("REMINDERS")).config
    assert config.allow_atomic is True and config.duplicate_window == 120


async def test_a_bucket_without_direct_gets_or_atomic_batches_is_updated_and_a_check_names_it(
    nc: Client, settings: Settings
) -> None:
    js = nc.jetstream()
    await js.create_key_value(KeyValueConfig(bucket=settings.kv_bucket, history=1))
    await js.key_value(settings.kv_bucket)
    with pytest.raises(ProvisionError, match="does not allow direct gets"):
        await ensure_bucket(js, settings, check=True)
    assert await ensure_bucket(js, settings) == "updated"
    config = (await js.stream_info(f"KV_{settings.kv_bucket}")).config
    assert config.allow_direct is True and config.max_msgs_per_subject == 1
    assert config.allow_atomic is True
    assert await ensure_bucket(js, settings, check=True) == "unchanged"


async def test_a_contradicting_stream_refuses_with_a_clear_message(
    nc: Client, settings: Settings
) -> None:
    await nc.jetstream().add_stream(
        StreamConfig(
            name="REMINDERS", subjects=["transcript.reminder.>"], storage=StorageType.MEMORY
        )
    )
    with pytest.raises(
        ProvisionError, match="REMINDERS exists with a contradicting config: storage"
    ):
        await provision(nc.jetstream(), settings)
    with pytest.raises(ProvisionError) as caught:
        await provision(nc.jetstream(), settings)
    assert "storage is memory, wanted file" in str(caught.value)
    assert "StorageType" not in str(caught.value)


async def test_the_gateway_refuses_to_start_against_a_contradicting_stream(
    nc: Client, settings: Settings, services: ServiceRunner
) -> None:
    await nc.jetstream().add_stream(
        StreamConfig(name="REMINDERS", subjects=["other.>"], storage=StorageType.FILE)
    )
    gateway = services.start("gateway", wait=False)
    assert gateway.process.wait(timeout=30) == 1
    log = gateway.log()
    assert "contradicting config" in log
    assert "Traceback" not in log
