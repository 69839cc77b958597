"""`reminders tenant add|list|remove|auth-config` and `reminders forget` (SPEC §10.1, §4.11).

One `tenant` command with an action rather than a group of four, so that every option is
an option of `reminders tenant` (its help and its docs list them all in one place).

Tenants live in one TOML file (`--file`, env `REMINDERS_TENANTS_FILE`, default
`k8s/base/tenants.toml`): the gateway reads their bounds from it, and `auth-config` writes
their NATS users into the authorization config between its tenants marker lines.

`forget` runs the purge of SPEC §4.11 itself, under the operator's credentials: no service
user holds a purge right, because the server cannot limit one to a single session's filter.
"""

from __future__ import annotations

import asyncio
from enum import StrEnum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from cli.options import nats_option
from contracts.tenants import DEFAULT_TENANT, is_tenant_name, scoped_session_id
from services.adapters.settings import Settings
from services.adapters.tenant_auth import (
    ROLES_GENERATED,
    AuthConfigError,
    password_variable,
    user_name,
    with_tenants,
)
from services.adapters.tenants_config import (
    TenantBounds,
    TenantsFile,
    TenantsFileError,
    dump_tenants,
    load_tenants,
)

DEFAULT_TENANTS_FILE = Path("k8s/base/tenants.toml")
DEFAULT_AUTH_CONFIG = Path("k8s/base/nats-auth.conf")


class Action(StrEnum):
    """What `reminders tenant` does."""

    add = "add"
    list = "list"
    remove = "remove"
    auth_config = "auth-config"


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def _load(path: Path) -> TenantsFile:
    try:
        return load_tenants(path)
    except TenantsFileError as exc:
        _fail(str(exc))
        raise  # unreachable: _fail exits


def tenant(
    action: Action = typer.Argument(..., help="add | list | remove | auth-config"),
    name: str | None = typer.Argument(None, help="The tenant (add, remove)."),
    file: Path = typer.Option(
        DEFAULT_TENANTS_FILE,
        "--file",
        envvar="REMINDERS_TENANTS_FILE",
        help="The tenants file (TOML).",
    ),
    commands_per_second: int | None = typer.Option(None, min=1, help="add: commands/s."),
    live_sessions: int | None = typer.Option(None, min=1, help="add: live sessions."),
    max_body_bytes: int | None = typer.Option(None, min=1, help="add: bytes of a body."),
    queries_in_flight: int | None = typer.Option(None, min=1, help="add: queries at once."),
    config: Path = typer.Option(
        DEFAULT_AUTH_CONFIG, "--config", help="auth-config: the NATS auth config to write."
    ),
    check: bool = typer.Option(False, "--check", help="auth-config: exit 1 if it is stale."),
) -> None:
    """Manage tenants: add (or change the bounds of) one, list them, remove one, or write
    their NATS users into the auth config (SPEC §10.1; docs/tenants.md)."""
    if action in (Action.add, Action.remove) and name is None:
        _fail(f"`reminders tenant {action}` needs the tenant's NAME")
    tenants = _load(file)
    if action is Action.add:
        assert name is not None
        bounds = TenantBounds(
            commands_per_second=commands_per_second,
            live_sessions=live_sessions,
            max_body_bytes=max_body_bytes,
            queries_in_flight=queries_in_flight,
        )
        _add(file, tenants, name, bounds)
    elif action is Action.remove:
        assert name is not None
        _remove(file, tenants, name)
    elif action is Action.list:
        _list(file, tenants)
    else:
        _auth_config(tenants, config, check)


def _add(file: Path, tenants: TenantsFile, name: str, bounds: TenantBounds) -> None:
    if not is_tenant_name(name) or name == DEFAULT_TENANT:
        _fail(f"{name!r} is not a tenant name (^[a-z0-9][a-z0-9-]{{0,31}}$, not 'default')")
    updated = tenants.model_copy(update={"tenants": {**tenants.tenants, name: bounds}})
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(dump_tenants(updated), encoding="utf-8")
    users = ", ".join(
        f"{user_name(name, role)} (${password_variable(name, role)})" for role in ROLES_GENERATED
    )
    Console().print(f"{name}: added to {file}; NATS users {users}", highlight=False)


def _remove(file: Path, tenants: TenantsFile, name: str) -> None:
    if name not in tenants.tenants:
        _fail(f"no tenant {name!r} in {file}")
    rest = {key: value for key, value in tenants.tenants.items() if key != name}
    file.write_text(dump_tenants(tenants.model_copy(update={"tenants": rest})), encoding="utf-8")
    Console().print(f"{name}: removed from {file} (its sessions stay in the log)", highlight=False)


def _list(file: Path, tenants: TenantsFile) -> None:
    table = Table(title=f"tenants: {file}")
    for column in ("tenant", "commands/s", "live sessions", "body bytes", "queries", "users"):
        table.add_column(column)
    for name in [DEFAULT_TENANT, *sorted(tenants.tenants)]:
        bounds = tenants.bounds(name)
        users = (
            "client"
            if name == DEFAULT_TENANT
            else ", ".join(user_name(name, role) for role in ROLES_GENERATED)
        )
        values = (
            bounds.commands_per_second,
            bounds.live_sessions,
            bounds.max_body_bytes,
            bounds.queries_in_flight,
        )
        table.add_row(name, *("-" if value is None else str(value) for value in values), users)
    Console().print(table)


def _auth_config(tenants: TenantsFile, config: Path, check: bool) -> None:
    try:
        current = config.read_text(encoding="utf-8")
        wanted = with_tenants(current, tenants)
    except (OSError, AuthConfigError) as exc:
        _fail(f"{config}: {exc}")
        return
    if check:
        if current != wanted:
            _fail(f"{config} is stale (run `reminders tenant auth-config`)")
        typer.echo(f"{config} is up to date")
        return
    config.write_text(wanted, encoding="utf-8")
    typer.echo(str(config))


def forget(
    session_id: str = typer.Argument(..., help="The session to forget."),
    tenant: str = typer.Option(
        DEFAULT_TENANT, "--tenant", envvar="REMINDERS_TENANT", help="The session's tenant."
    ),
    nats_url: str | None = nats_option(),
) -> None:
    """Forget a session (operator only): purge its events, tombstone its projection and
    audit it, under this user's own rights (no service user may purge the log)."""
    from services.adapters.connection import CLI_CONNECT_TIMEOUT_S, NatsUnreachable, connect
    from services.gateway.forget import Forgetter

    if tenant != DEFAULT_TENANT and not is_tenant_name(tenant):
        _fail(f"{tenant!r} is not a tenant name")
    settings = Settings.from_env(nats_url=nats_url)

    async def run() -> dict[str, object]:
        nc = await connect(
            settings, "reminders-forget", startup_timeout_s=CLI_CONNECT_TIMEOUT_S, fail_fast=True
        )
        try:
            scoped = scoped_session_id(tenant, session_id)
            return await Forgetter(nc, settings).forget(scoped, None)
        finally:
            await nc.drain()

    try:
        reply = asyncio.run(run())
    except NatsUnreachable as exc:
        _fail(str(exc))
        return
    if not reply.get("ok"):
        error = reply.get("error")
        _fail(f"forget failed: {error.get('message') if isinstance(error, dict) else error}")
    Console().print(
        f"forgot {session_id!r}: {reply['purged_count']} events purged through stream "
        f"sequence {reply['purged_through']}",
        highlight=False,
    )


def tenants_line(settings: Settings) -> str:
    """What `reminders provision` reports of the tenants file (exits 1 if it is not valid):
    tenants need no stream, bucket or consumer of their own, only their NATS users."""
    try:
        tenants = load_tenants(settings.tenants_file)
    except TenantsFileError as exc:
        _fail(str(exc))
        raise  # unreachable: _fail exits
    names = ", ".join([DEFAULT_TENANT, *sorted(tenants.tenants)])
    return f"tenants: {names}" + (
        f" (from {settings.tenants_file})" if settings.tenants_file else ""
    )


def register(app: typer.Typer) -> None:
    """Add `tenant ...` and `forget` to the `reminders` command line."""
    app.command(name="tenant")(tenant)
    app.command(name="forget")(forget)
