"""The tenants file (SPEC §10.1): each tenant's bounds and the NATS users of its roles.

One TOML file, read by the gateway (its bounds) and by `reminders tenant` and
`reminders tenant auth-config` (its users, written into the NATS authorization config):

```toml
[defaults]                 # bounds of a tenant that sets none of its own
commands_per_second = 500
live_sessions = 10000
max_body_bytes = 16384

[tenants.acme]
commands_per_second = 200  # per gateway replica, over all the tenant's sessions
live_sessions = 1000       # sessions with a command in the last 5 minutes
max_body_bytes = 4096      # a reminder body, at most the deployment's own bound
queries_in_flight = 100    # queries waiting at once; keep the sum under
                           # REMINDERS_MAX_WAITING_QUERIES so no tenant can take every place
```

Without a file there is one tenant, `default`, with no bounds beyond the per-session ones.
Each tenant gets two NATS users, `<tenant>_host` and `<tenant>_auditor` (`-` written `_`),
whose passwords come from `<TENANT>_HOST_PASSWORD` and `<TENANT>_AUDITOR_PASSWORD`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contracts.tenants import DEFAULT_TENANT, is_tenant_name


class TenantsFileError(ValueError):
    """The tenants file cannot be read or is not valid; the message names the place."""


class TenantBounds(BaseModel):
    """One tenant's bounds; a missing bound is unbounded (the per-session ones still hold)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    commands_per_second: int | None = Field(
        default=None, ge=1, description="Decided commands per second, per gateway replica."
    )
    live_sessions: int | None = Field(
        default=None, ge=1, description="Sessions with a command in the last 5 minutes."
    )
    max_body_bytes: int | None = Field(
        default=None, ge=1, description="UTF-8 bytes of one reminder body."
    )
    queries_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="Queries (and their min_seq waits) at once, per gateway replica.",
    )

    def with_defaults(self, defaults: TenantBounds) -> TenantBounds:
        """This tenant's bounds, each missing one taken from `defaults`."""
        return TenantBounds(
            commands_per_second=self.commands_per_second or defaults.commands_per_second,
            live_sessions=self.live_sessions or defaults.live_sessions,
            max_body_bytes=self.max_body_bytes or defaults.max_body_bytes,
            queries_in_flight=self.queries_in_flight or defaults.queries_in_flight,
        )


class TenantsFile(BaseModel):
    """The whole file: defaults and the tenants by name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    defaults: TenantBounds = Field(default_factory=TenantBounds, description="Default bounds.")
    tenants: dict[str, TenantBounds] = Field(
        default_factory=dict, description="Each tenant's own bounds, by name."
    )

    @field_validator("tenants")
    @classmethod
    def _names(cls, tenants: dict[str, TenantBounds]) -> dict[str, TenantBounds]:
        for name in tenants:
            if not is_tenant_name(name):
                raise ValueError(f"{name!r} is not a tenant name (^[a-z0-9][a-z0-9-]{{0,31}}$)")
        return tenants

    def knows(self, tenant: str) -> bool:
        """Whether `tenant` is `default` or a tenant of this file."""
        return tenant == DEFAULT_TENANT or tenant in self.tenants

    def bounds(self, tenant: str) -> TenantBounds:
        """The bounds in force for `tenant`."""
        own = self.tenants.get(tenant)
        return self.defaults if own is None else own.with_defaults(self.defaults)


def load_tenants(path: Path | None) -> TenantsFile:
    """The tenants file at `path` (None or a missing file: only `default`)."""
    if path is None or not path.exists():
        return TenantsFile()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        return TenantsFile.model_validate(raw)
    except tomllib.TOMLDecodeError as exc:
        raise TenantsFileError(f"{path}: not TOML: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(p) for p in first["loc"])
        raise TenantsFileError(f"{path}: {place}: {first['msg']}") from None


def dump_tenants(tenants: TenantsFile) -> str:
    """The file's TOML text (what `reminders tenant add|remove` writes back)."""
    lines = [
        "# Tenants of this deployment (SPEC §10.1); `reminders tenant add|list|remove` edit it",
        "# and `reminders tenant auth-config` turns it into the NATS users.",
    ]

    def table(header: str, bounds: TenantBounds) -> None:
        lines.extend(("", f"[{header}]"))
        values: dict[str, Any] = bounds.model_dump(exclude_none=True)
        lines.extend(f"{key} = {value}" for key, value in values.items())

    table("defaults", tenants.defaults)
    for name in sorted(tenants.tenants):
        table(f"tenants.{name}", tenants.tenants[name])
    return "\n".join(lines) + "\n"
