"""Configuration, read once from the environment (and CLI flags) into one settings object.

Every variable is documented in the README. Nothing connects at import time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contracts.subjects import (
    DEFAULT_AGENT_EVENTS_STREAM,
    DEFAULT_AUDIT_STREAM,
    DEFAULT_BUCKET,
    DEFAULT_DLQ_STREAM,
    DEFAULT_STREAM,
)
from core.config import CoreConfig
from core.size import check_fits
from services.adapters.tenants_config import TenantsFile, load_tenants

#: How often a connection pings its server, and how many pings may go unanswered before the
#: connection is taken as stale and replaced by one to another server of the list: a paused
#: or silently cut server is left within interval × (outstanding + 1), 3 s, instead of
#: nats-py's 2 min × 3. Measured cost: docs/reliability.md (known limits, stalled servers).
DEFAULT_PING_INTERVAL_S = 1.0
DEFAULT_MAX_OUTSTANDING_PINGS = 2


EventLoopChoice = Literal["auto", "uvloop", "asyncio"]
"""`REMINDERS_EVENT_LOOP`: which event loop the services run on (`services.runtime`)."""


class Settings(BaseModel):
    """What every service and the CLI need to know."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nats_url: str = Field(default="nats://127.0.0.1:4222", description="REMINDERS_NATS_URL")
    stream: str = Field(default=DEFAULT_STREAM, description="REMINDERS_STREAM")
    dlq_stream: str = Field(default=DEFAULT_DLQ_STREAM, description="REMINDERS_DLQ_STREAM")
    audit_stream: str = Field(default=DEFAULT_AUDIT_STREAM, description="REMINDERS_AUDIT_STREAM")
    kv_bucket: str = Field(default=DEFAULT_BUCKET, description="REMINDERS_KV_BUCKET")
    agent_events_stream: str = Field(
        default=DEFAULT_AGENT_EVENTS_STREAM, description="REMINDERS_AGENT_EVENTS_STREAM"
    )
    agent_events_max_age_s: float = Field(
        default=7 * 24 * 3600.0, gt=0, description="REMINDERS_AGENT_EVENTS_MAX_AGE_S"
    )
    providers_config: Path | None = Field(
        default=None, description="REMINDERS_PROVIDERS_CONFIG (TOML; none: the defaults)"
    )
    tenants_file: Path | None = Field(
        default=None, description="REMINDERS_TENANTS_FILE (TOML; none: only `default`)"
    )
    tenant: str = Field(
        default="default",
        pattern=r"^[a-z0-9][a-z0-9-]{0,31}$",
        description="REMINDERS_TENANT (the tenant a host or CLI acts for)",
    )
    replicas: int = Field(default=1, ge=1, le=5, description="REMINDERS_REPLICAS")
    data_dir: Path = Field(default=Path("./data"), description="REMINDERS_DATA_DIR")
    http_host: str = Field(default="127.0.0.1", description="REMINDERS_HTTP_HOST")
    http_port: int = Field(default=0, ge=0, le=65535, description="REMINDERS_HTTP_PORT")
    max_batch_messages: int = Field(default=1000, ge=1, le=1000, description="group commit size")
    conflict_retries: int = Field(default=5, ge=0, description="REMINDERS_CONFLICT_RETRIES")
    rate_limit_per_second: int = Field(default=50, ge=1, description="REMINDERS_RATE_LIMIT")
    max_in_flight: int = Field(
        # Measured (docs/reliability.md, overload): 256 in flight let admitted commands
        # queue behind each other for seconds; 64 keeps a saturated gateway's throughput.
        default=64,
        ge=1,
        description="REMINDERS_MAX_IN_FLIGHT: commands a gateway serves at once; past it, a "
        "command is answered `unavailable` with `retry_after_ms` at once (load shedding).",
    )
    shed_latency_ms: int = Field(
        default=0,
        ge=0,
        description="REMINDERS_SHED_LATENCY_MS: while a gateway sheds commands, it lowers its "
        "in-flight bound so that the commands it admits are answered within this mean "
        "latency (0: REMINDERS_SHED_LATENCY_FACTOR decides the target).",
    )
    shed_latency_factor: float = Field(
        # Measured (docs/reliability.md, overload): the factor that holds the admitted p99
        # within 5x the unloaded one at twice the saturation rate.
        default=3.0,
        ge=0,
        description="REMINDERS_SHED_LATENCY_FACTOR: without REMINDERS_SHED_LATENCY_MS, the "
        "target is this many times the latency of a command the gateway served alone "
        "(0 with REMINDERS_SHED_LATENCY_MS at 0: the bound stays at REMINDERS_MAX_IN_FLIGHT).",
    )
    max_waiting_queries: int = Field(
        default=1000, ge=1, description="REMINDERS_MAX_WAITING_QUERIES (per gateway replica)"
    )
    cache_sessions: int = Field(default=10_000, ge=0, description="REMINDERS_CACHE_SESSIONS")
    gateway_cache_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        description="REMINDERS_GATEWAY_CACHE_BYTES (encoded state bytes a gateway caches)",
    )
    projector_partitions: int = Field(
        default=1, ge=1, le=64, description="REMINDERS_PROJECTOR_PARTITIONS (docs/scaling.md)"
    )
    projector_partition: int | None = Field(
        default=None, ge=0, description="REMINDERS_PROJECTOR_PARTITION (this process)"
    )
    projector_cache_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="REMINDERS_PROJECTOR_CACHE_BYTES (encoded state bytes the projector caches)",
    )
    event_loop: EventLoopChoice = Field(
        default="auto",
        description="REMINDERS_EVENT_LOOP: the services' event loop; `auto` is uvloop where it "
        "is installed (not on Windows), else asyncio's own (docs/configuration.md)",
    )
    request_timeout_s: float = Field(default=5.0, gt=0, description="NATS request timeout")
    failover_after_s: float = Field(
        default=10.0,
        ge=0,
        description="REMINDERS_FAILOVER_AFTER_S (a gateway whose commits find no stream leader "
        "for this long reconnects to another server; 0: never)",
    )
    nats_ping_interval_s: float = Field(
        default=DEFAULT_PING_INTERVAL_S,
        gt=0,
        description="REMINDERS_NATS_PING_INTERVAL_S (how often a connection pings its server)",
    )
    nats_max_outstanding_pings: int = Field(
        default=DEFAULT_MAX_OUTSTANDING_PINGS,
        ge=1,
        description="REMINDERS_NATS_MAX_OUTSTANDING_PINGS (unanswered pings before a "
        "connection is stale and replaced by one to another server)",
    )
    nats_user: str | None = Field(default=None, description="REMINDERS_NATS_USER")
    nats_password: str | None = Field(default=None, description="REMINDERS_NATS_PASSWORD")
    nats_inbox_prefix: str | None = Field(
        default=None,
        description="REMINDERS_NATS_INBOX_PREFIX; default `_INBOX.<user>` with a user, "
        "else `_INBOX` (the reply inbox each user alone may subscribe to)",
    )
    nats_token: str | None = Field(default=None, description="REMINDERS_NATS_TOKEN")
    nats_creds_file: Path | None = Field(default=None, description="REMINDERS_NATS_CREDS_FILE")
    nats_nkey_seed_file: Path | None = Field(
        default=None, description="REMINDERS_NATS_NKEY_SEED_FILE"
    )
    nats_tls_ca: Path | None = Field(default=None, description="REMINDERS_NATS_TLS_CA")
    nats_tls_cert: Path | None = Field(default=None, description="REMINDERS_NATS_TLS_CERT")
    nats_tls_key: Path | None = Field(default=None, description="REMINDERS_NATS_TLS_KEY")
    otlp_endpoint: str | None = Field(default=None, description="OTEL_EXPORTER_OTLP_ENDPOINT")
    trace_file: Path | None = Field(default=None, description="REMINDERS_TRACE_FILE")
    core: CoreConfig = Field(default_factory=CoreConfig, description="Rule bounds and rendering.")

    @model_validator(mode="after")
    def _partition_in_range(self) -> Settings:
        if self.projector_partition is not None and (
            self.projector_partition >= self.projector_partitions
        ):
            raise ValueError(
                f"REMINDERS_PROJECTOR_PARTITION={self.projector_partition} is not below "
                f"REMINDERS_PROJECTOR_PARTITIONS={self.projector_partitions}"
            )
        return self

    def tenants(self) -> TenantsFile:
        """The tenants file (SPEC §10.1); only `default` without one."""
        return load_tenants(self.tenants_file)

    def __repr__(self) -> str:
        # Never print secrets (settings objects end up in logs and tracebacks).
        shown = self.model_dump(exclude={"nats_password", "nats_token"})
        return f"Settings({shown})"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read `REMINDERS_*` variables once; keyword overrides (CLI flags) win."""
        env = os.environ if env is None else env
        fields: dict[str, object] = {}
        simple = {
            "REMINDERS_NATS_URL": "nats_url",
            "REMINDERS_STREAM": "stream",
            "REMINDERS_DLQ_STREAM": "dlq_stream",
            "REMINDERS_AUDIT_STREAM": "audit_stream",
            "REMINDERS_KV_BUCKET": "kv_bucket",
            "REMINDERS_AGENT_EVENTS_STREAM": "agent_events_stream",
            "REMINDERS_AGENT_EVENTS_MAX_AGE_S": "agent_events_max_age_s",
            "REMINDERS_PROVIDERS_CONFIG": "providers_config",
            "REMINDERS_TENANTS_FILE": "tenants_file",
            "REMINDERS_TENANT": "tenant",
            "REMINDERS_REPLICAS": "replicas",
            "REMINDERS_DATA_DIR": "data_dir",
            "REMINDERS_HTTP_HOST": "http_host",
            "REMINDERS_HTTP_PORT": "http_port",
            "REMINDERS_CONFLICT_RETRIES": "conflict_retries",
            "REMINDERS_FAILOVER_AFTER_S": "failover_after_s",
            "REMINDERS_RATE_LIMIT": "rate_limit_per_second",
            "REMINDERS_MAX_IN_FLIGHT": "max_in_flight",
            "REMINDERS_SHED_LATENCY_MS": "shed_latency_ms",
            "REMINDERS_SHED_LATENCY_FACTOR": "shed_latency_factor",
            "REMINDERS_MAX_WAITING_QUERIES": "max_waiting_queries",
            "REMINDERS_CACHE_SESSIONS": "cache_sessions",
            "REMINDERS_GATEWAY_CACHE_BYTES": "gateway_cache_bytes",
            "REMINDERS_PROJECTOR_PARTITIONS": "projector_partitions",
            "REMINDERS_PROJECTOR_PARTITION": "projector_partition",
            "REMINDERS_PROJECTOR_CACHE_BYTES": "projector_cache_bytes",
            "REMINDERS_EVENT_LOOP": "event_loop",
            "REMINDERS_NATS_PING_INTERVAL_S": "nats_ping_interval_s",
            "REMINDERS_NATS_MAX_OUTSTANDING_PINGS": "nats_max_outstanding_pings",
            "REMINDERS_NATS_USER": "nats_user",
            "REMINDERS_NATS_PASSWORD": "nats_password",
            "REMINDERS_NATS_INBOX_PREFIX": "nats_inbox_prefix",
            "REMINDERS_NATS_TOKEN": "nats_token",
            "REMINDERS_NATS_CREDS_FILE": "nats_creds_file",
            "REMINDERS_NATS_NKEY_SEED_FILE": "nats_nkey_seed_file",
            "REMINDERS_NATS_TLS_CA": "nats_tls_ca",
            "REMINDERS_NATS_TLS_CERT": "nats_tls_cert",
            "REMINDERS_NATS_TLS_KEY": "nats_tls_key",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "otlp_endpoint",
            "REMINDERS_TRACE_FILE": "trace_file",
        }
        for variable, name in simple.items():
            if variable in env:
                fields[name] = env[variable]
        core: dict[str, object] = {}
        for variable, name in {
            "REMINDERS_MAX_BODY_BYTES": "max_body_bytes",
            "REMINDERS_MAX_LIVE": "max_live",
            "REMINDERS_MAX_ENVELOPE_BYTES": "max_envelope_bytes",
            "REMINDERS_MAX_SESSION_BYTES": "max_session_bytes",
            "REMINDERS_MAX_USER_TEXT_BYTES": "max_user_text_bytes",
            "REMINDERS_MAX_PAYLOAD_BYTES": "max_payload_bytes",
            "REMINDERS_REDACT": "redact",
            "REMINDERS_INSTRUCTIONS": "instructions",
            "REMINDERS_NONCE": "nonce_enabled",
            "REMINDERS_DEFAULT_FORMAT": "default_format",
            "REMINDERS_RENDER_MAX_TOKENS": "render_max_tokens",
            "REMINDERS_MAX_MUTES": "max_mutes",
        }.items():
            if variable in env:
                core[name] = env[variable]
        if core:
            fields["core"] = CoreConfig.model_validate(core)
        fields.update({key: value for key, value in overrides.items() if value is not None})
        return cls.model_validate(fields)


class PayloadTooSmall(RuntimeError):
    """The size bounds could break the invariant on this server (SPEC §4.1.1)."""


def check_payload_bounds(core: CoreConfig, server_max_payload: int) -> None:
    """Refuse to start, in one line, when the core's bounds could produce an event, a reply
    or a state larger than the server's `max_payload` (read from the connection)."""
    problem = check_fits(core, server_max_payload)
    if problem is not None:
        raise PayloadTooSmall(f"refusing to start: {problem}")
