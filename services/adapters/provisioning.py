"""Provisioning (SPEC §3.1): the streams, the projection bucket and the workers' durable
consumers — created or updated by `reminders provision`, checked by every service at
start-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import nats
import orjson
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from contracts.subjects import AGENT_EVENT_SUBJECTS, AUDIT_SUBJECTS, DLQ_SUBJECTS, EVENT_SUBJECTS
from services.adapters.jetstream import JetStreamApiError
from services.adapters.partitions import partition_stream_config, source_contradictions
from services.adapters.settings import Settings


class ProvisionError(RuntimeError):
    """A stream, bucket or consumer is missing or contradicts its configuration; the
    message names it and the command that fixes it."""


PROVISION_HINT = "run `reminders provision` (as an admin user)"


def event_stream_config(settings: Settings) -> StreamConfig:
    """`REMINDERS` as SPEC §3.1 says."""
    return StreamConfig(
        name=settings.stream,
        subjects=[EVENT_SUBJECTS],
        storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS,
        num_replicas=settings.replicas,
        allow_atomic=True,
        allow_direct=True,
        deny_delete=True,
        deny_purge=False,
        duplicate_window=120.0,
    )


def side_stream_configs(settings: Settings) -> list[StreamConfig]:
    """`REMINDERS_DLQ` and `REMINDERS_AUDIT`."""
    return [
        StreamConfig(
            name=settings.dlq_stream,
            subjects=[DLQ_SUBJECTS],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            num_replicas=settings.replicas,
            allow_direct=True,
            duplicate_window=120.0,
        ),
        StreamConfig(
            name=settings.audit_stream,
            subjects=[AUDIT_SUBJECTS],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            num_replicas=settings.replicas,
            deny_delete=True,
            allow_direct=True,
            duplicate_window=120.0,
        ),
    ]


def agent_events_stream_config(settings: Settings) -> StreamConfig:
    """`AGENT_EVENTS` (SPEC §9.1): runtime events, file storage, limits retention, max age
    7 days by default, deduplicated on `Nats-Msg-Id` (the runtime event id) for 2 minutes."""
    return StreamConfig(
        name=settings.agent_events_stream,
        subjects=[AGENT_EVENT_SUBJECTS],
        storage=StorageType.FILE,
        retention=RetentionPolicy.LIMITS,
        num_replicas=settings.replicas,
        max_age=settings.agent_events_max_age_s,
        allow_direct=True,
        duplicate_window=120.0,
    )


def _contradictions(existing: StreamConfig, wanted: StreamConfig) -> list[str]:
    """Differences that an update cannot or must not fix."""
    problems = []
    if existing.storage != wanted.storage:
        problems.append(f"storage is {_plain(existing.storage)}, wanted {_plain(wanted.storage)}")
    if set(existing.subjects or []) != set(wanted.subjects or []):
        problems.append(f"subjects are {existing.subjects}, wanted {wanted.subjects}")
    if wanted.retention is not None and existing.retention != wanted.retention:
        problems.append(
            f"retention is {_plain(existing.retention)}, wanted {_plain(wanted.retention)}"
        )
    if wanted.sources:
        problems += source_contradictions(existing, wanted)
    return problems


def _plain(value: object) -> str:
    """`file`, not `StorageType.FILE`: the word nats-server's own config uses."""
    return str(getattr(value, "value", value))


def _needs_update(existing: StreamConfig, wanted: StreamConfig) -> bool:
    keys = ("allow_atomic", "allow_direct", "deny_delete", "deny_purge", "num_replicas")
    if any(bool(getattr(existing, key)) != bool(getattr(wanted, key)) for key in keys[:4]):
        return True
    if (existing.num_replicas or 1) != (wanted.num_replicas or 1):
        return True
    if wanted.max_age and abs((existing.max_age or 0) - wanted.max_age) > 1e-3:
        return True
    if not wanted.duplicate_window:
        return False
    return abs((existing.duplicate_window or 0) - wanted.duplicate_window) > 1e-3


async def ensure_stream(js: JetStreamContext, wanted: StreamConfig, *, check: bool = False) -> str:
    """Create the stream, or update it to `wanted`; returns what was done. With `check`,
    change nothing and raise unless it is already as wanted."""
    try:
        info = await js.stream_info(wanted.name or "")
    except NotFoundError:
        if check:
            raise ProvisionError(f"stream {wanted.name} is missing: {PROVISION_HINT}") from None
        await js.add_stream(wanted)
        return "created"
    problems = _contradictions(info.config, wanted)
    if problems:
        raise ProvisionError(
            f"stream {wanted.name} exists with a contradicting config: {'; '.join(problems)}"
        )
    if not _needs_update(info.config, wanted):
        return "unchanged"
    if check:
        raise ProvisionError(f"stream {wanted.name} is out of date: {PROVISION_HINT}")
    try:
        await js.update_stream(wanted)
    except nats.js.errors.APIError as exc:
        raise ProvisionError(f"stream {wanted.name} cannot be updated: {exc.description}") from exc
    return "updated"


async def ensure_bucket(js: JetStreamContext, settings: Settings, *, check: bool = False) -> str:
    """Create the projection bucket `REMINDER_SESSIONS` if it is missing (history 1), with
    direct gets and atomic batches allowed; an older bucket without them is updated.

    Direct gets are how every reader takes one key's value (`read_last_value`): any server
    of the stream answers one at once, where a `STREAM.MSG.GET` waits in the server's
    JetStream API queue behind every other API call (measured at 50–200 ms per read under
    load, on 2 cores). Atomic batches are how the projector writes the sessions of a round
    at once, each on its own revision (`KvSessionStore.write_many`)."""
    stream = f"KV_{settings.kv_bucket}"
    try:
        config = (await js.stream_info(stream)).config
    except nats.js.errors.NotFoundError:
        if check:
            raise ProvisionError(
                f"bucket {settings.kv_bucket} is missing: {PROVISION_HINT}"
            ) from None
        await js.create_key_value(
            KeyValueConfig(
                bucket=settings.kv_bucket,
                history=1,
                storage=StorageType.FILE,
                replicas=settings.replicas,
                description="Reminder Ledger session projections (SPEC §6.3)",
                direct=True,
            )
        )
        # nats-py's bucket config has no atomic-batch flag: set it on the bucket's stream.
        config = (await js.stream_info(stream)).config
        config.allow_atomic = True
        await js.update_stream(config)
        return "created"
    if config.allow_direct and config.allow_atomic:
        return "unchanged"
    if check:
        raise ProvisionError(
            f"bucket {settings.kv_bucket} does not allow direct gets and atomic batches: "
            f"{PROVISION_HINT}"
        )
    config.allow_direct = True
    config.allow_atomic = True
    await js.update_stream(config)
    return "updated"


async def provision(
    js: JetStreamContext, settings: Settings, *, check: bool = False
) -> dict[str, str]:
    """Create or update every stream of SPEC §3.1 and the projection bucket, idempotently.

    With `check` (what services do at start-up) nothing is changed: anything missing or out
    of date raises a `ProvisionError` naming it and `reminders provision`.
    """
    done = {settings.stream: await ensure_stream(js, event_stream_config(settings), check=check)}
    for config in side_stream_configs(settings):
        done[config.name or ""] = await ensure_stream(js, config, check=check)
    if not check:
        # Only the providers service reads AGENT_EVENTS, and it checks it through its own
        # durable consumer; other services have no right to look at that stream.
        agent_events = agent_events_stream_config(settings)
        done[agent_events.name or ""] = await ensure_stream(js, agent_events)
    done[f"KV_{settings.kv_bucket}"] = await ensure_bucket(js, settings, check=check)
    if not check and settings.projector_partitions > 1:
        # The partitioned projectors check the view through their own consumers, like the
        # providers service checks AGENT_EVENTS; with one partition it does not exist at all.
        view = partition_stream_config(settings)
        done[view.name or ""] = await ensure_stream(js, view)
    return done


@dataclass(frozen=True)
class DurableConsumer:
    """A durable consumer a worker needs: created by `reminders provision`, checked by the
    worker at start-up. `config` is the JetStream API's consumer config."""

    stream: str
    config: dict[str, Any]

    @property
    def name(self) -> str:
        """The durable name."""
        return str(self.config["durable_name"])


async def consumer_info(nc: Client, stream: str, durable: str) -> dict[str, Any]:
    """Raw consumer info (config, num_pending, num_ack_pending, delivered, priority groups)."""
    reply = await nc.request(f"$JS.API.CONSUMER.INFO.{stream}.{durable}", b"", timeout=5)
    answer: dict[str, Any] = orjson.loads(reply.data)
    if "error" in answer:
        raise JetStreamApiError(answer["error"])
    return answer


async def ensure_consumer(nc: Client, wanted: DurableConsumer, *, check: bool = False) -> str:
    """Create the durable consumer or update it to `wanted` (an existing durable otherwise
    keeps its old config silently). With `check`, raise unless it is already as wanted."""
    try:
        existing: dict[str, Any] = (await consumer_info(nc, wanted.stream, wanted.name))["config"]
    except JetStreamApiError as exc:
        if exc.code != 404:
            raise
        existing = {}
    drift = sorted(key for key, value in wanted.config.items() if existing.get(key) != value)
    if not drift:
        return "unchanged"
    if check:
        what = "is missing" if not existing else f"differs in {', '.join(drift)}"
        raise ProvisionError(f"consumer {wanted.name} of {wanted.stream} {what}: {PROVISION_HINT}")
    reply = await nc.request(
        f"$JS.API.CONSUMER.CREATE.{wanted.stream}.{wanted.name}",
        orjson.dumps({"stream_name": wanted.stream, "config": wanted.config}),
        timeout=5,
    )
    answer: dict[str, Any] = orjson.loads(reply.data)
    if "error" in answer:
        raise JetStreamApiError(answer["error"])
    return "updated" if existing else "created"
