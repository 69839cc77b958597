"""Tenants (SPEC §10.1): the name rule, tenant-scoped session ids, and tenant subjects.

A tenant's hosts publish on subjects that carry the tenant's name as a token of its own, and
their NATS user may publish and subscribe on their tenant's subjects alone, so the server
asserts who the caller is: the gateway reads the tenant from the subject a command came on.

Sessions are namespaced per tenant. The host's `session_id` `s1` of tenant `acme` is the
session `@acme/s1` everywhere behind the gateway (the log, the projection, replay), so the
same id in two tenants names two sessions, and a foreign session cannot even be addressed:
asking for it is asking for one's own unknown session. The `default` tenant keeps its ids as
they are (a single-tenant deployment, its log and its golden files are unchanged); its hosts
may not use an id of the reserved form `@<tenant>/...`.
"""

from __future__ import annotations

import re
from typing import Final

from contracts.subjects import (
    AGENT_EVENT_PREFIX,
    COMMAND_PREFIX,
    session_token,
)

DEFAULT_TENANT: Final = "default"
TENANT_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
"""A tenant's name (SPEC §10.1)."""

_SCOPED = re.compile(r"^@([a-z0-9][a-z0-9-]{0,31})/")
TENANT_TOKEN: Final = "t"
"""The subject token that introduces a tenant's name: `reminders.v1.t.<tenant>.<op>`."""
TENANT_COMMAND_SUBJECTS: Final = f"{COMMAND_PREFIX}.{TENANT_TOKEN}.*.*"
"""Every tenant's commands and JSON-RPC (the gateway's second subscription)."""
TENANT_AGENT_EVENT_SUBJECTS: Final = f"{AGENT_EVENT_PREFIX}.{TENANT_TOKEN}.*.*.*"
"""Every tenant's runtime events (inside the `AGENT_EVENTS` stream's `agent.events.>`)."""


def is_tenant_name(name: str) -> bool:
    """Whether `name` follows the tenant name rule."""
    return TENANT_NAME.match(name) is not None


def scoped_session_id(tenant: str, session_id: str) -> str:
    """The session behind the gateway: the id itself for `default`, else `@<tenant>/<id>`."""
    if tenant == DEFAULT_TENANT:
        return session_id
    return f"@{tenant}/{session_id}"


def split_session_id(scoped: str) -> tuple[str, str]:
    """`(tenant, host session id)` of a session id behind the gateway."""
    match = _SCOPED.match(scoped)
    if match is None:
        return DEFAULT_TENANT, scoped
    return match.group(1), scoped[match.end() :]


def is_reserved_session_id(session_id: str) -> bool:
    """Whether an id has the tenant-scoped form, which a `default` host may not send."""
    return _SCOPED.match(session_id) is not None


def tenant_command_subject(tenant: str, op: str) -> str:
    """Where a host of `tenant` sends `op`: `reminders.v1.<op>` for `default`, else
    `reminders.v1.t.<tenant>.<op>`."""
    if tenant == DEFAULT_TENANT:
        return f"{COMMAND_PREFIX}.{op}"
    return f"{COMMAND_PREFIX}.{TENANT_TOKEN}.{tenant}.{op}"


def command_tenant(subject: str) -> tuple[str, str] | None:
    """`(tenant, op)` of a command subject, or None when it has neither shape."""
    parts = subject.split(".")
    if len(parts) == 3:
        return DEFAULT_TENANT, parts[2]
    if len(parts) == 5 and parts[2] == TENANT_TOKEN and is_tenant_name(parts[3]):
        return parts[3], parts[4]
    return None


def tenant_acp_subject(scoped: str) -> tuple[str, str]:
    """`(subject, host session id)` of a session's ACP notifications: `reminders.v1.acp.<token>`
    for `default`, else `reminders.v1.t.<tenant>.acp.<token>` (the token of the host's id)."""
    tenant, session_id = split_session_id(scoped)
    token = session_token(session_id)
    if tenant == DEFAULT_TENANT:
        return f"{COMMAND_PREFIX}.acp.{token}", session_id
    return f"{COMMAND_PREFIX}.{TENANT_TOKEN}.{tenant}.acp.{token}", session_id


def tenant_agent_event_subject(tenant: str, kind: str, session_id: str) -> str:
    """Where a host of `tenant` publishes a runtime event: `agent.events.<kind>.<token>` for
    `default`, else `agent.events.t.<tenant>.<kind>.<token>`."""
    token = session_token(session_id)
    if tenant == DEFAULT_TENANT:
        return f"{AGENT_EVENT_PREFIX}.{kind}.{token}"
    return f"{AGENT_EVENT_PREFIX}.{TENANT_TOKEN}.{tenant}.{kind}.{token}"


def agent_event_tenant(subject: str) -> tuple[str, str] | None:
    """`(tenant, subject in the default shape)` of a runtime event subject: a tenant's
    `agent.events.t.<tenant>.<kind>.<token>` becomes `agent.events.<kind>.<token>`; None
    for a tenant subject that is not well-formed."""
    parts = subject.split(".")
    if len(parts) > 2 and parts[2] == TENANT_TOKEN and len(parts) != 4:
        if len(parts) != 6 or not is_tenant_name(parts[3]):
            return None
        return parts[3], ".".join((*parts[:2], *parts[4:]))
    return DEFAULT_TENANT, subject
