"""Which sessions an audit sees (SPEC §10.1): one tenant's, or the whole fleet's.

Replay, export, verify-projection (and any later audit, such as stats) take one
`AuditScope`: it turns the session id a tenant's people know (`s1`) into the session behind
the gateway (`@acme/s1`), and keeps only the tenant's sessions out of a whole-stream read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from contracts.stored import StoredEvent
from contracts.tenants import is_tenant_name, scoped_session_id, split_session_id


class ScopeError(ValueError):
    """Not a tenant name."""


@dataclass(frozen=True)
class AuditScope:
    """One tenant (`tenant`), or every session of every tenant (`None`, the fleet)."""

    tenant: str | None = None

    @classmethod
    def of(cls, tenant: str | None) -> AuditScope:
        """The scope of `--tenant` (None or empty: the fleet); `ScopeError` for a bad name."""
        if not tenant:
            return cls(None)
        if not is_tenant_name(tenant):
            raise ScopeError(f"{tenant!r} is not a tenant name (^[a-z0-9][a-z0-9-]{{0,31}}$)")
        return cls(tenant)

    def session_id(self, given: str) -> str:
        """The session behind the gateway: `given` scoped to the tenant (the fleet: as is)."""
        return given if self.tenant is None else scoped_session_id(self.tenant, given)

    def covers(self, session_id: str) -> bool:
        """Whether a session (as stored) is within the scope."""
        return self.tenant is None or split_session_id(session_id)[0] == self.tenant

    def rows(self, rows: Iterable[StoredEvent]) -> list[StoredEvent]:
        """The events of sessions within the scope (an envelope without a session id: none)."""
        return [
            row
            for row in rows
            if isinstance(sid := row.envelope.get("session_id"), str) and self.covers(sid)
        ]
