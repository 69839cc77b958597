"""The `reminders` command line: one entrypoint for every service and tool."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import typer
from rich.console import Console

from cli.hook import hook_app
from cli.options import NATS_ENV, given_nats, nats_option, nats_url_alias
from cli.tail import tail_command
from cli.tenant import register as register_tenant_commands
from services.adapters.settings import Settings
from services.workers import WORKERS

app = typer.Typer(
    name="reminders",
    help="Reminder Ledger: event-sourced system reminders for LLM agent sessions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.command()
def demo(
    log: bool = typer.Option(True, "--log/--no-log", help="Print the event log table at the end."),
) -> None:
    """Drive a scripted agent session through the pure core (no server) and print every
    command, the events it appended and the envelopes rendered."""
    from cli.demo import print_demo

    print_demo(Console(), show_log=log)


@app.command()
def up(
    demo: bool = typer.Option(
        False, "--demo", help="Drive a scripted agent session through the bus."
    ),
    exit_after_demo: bool = typer.Option(
        False, "--exit-after-demo", help="Stop everything once the demo has run."
    ),
    nats_flag: str | None = nats_option(
        f"Use this NATS server (or {NATS_ENV}) instead of starting the embedded one."
    ),
    nats_alias: str | None = nats_url_alias(),
    data_dir: Path = typer.Option(
        Path("./data"),
        "--data-dir",
        envvar="REMINDERS_DATA_DIR",
        help="Where the embedded server keeps its store and the services their logs.",
    ),
) -> None:
    """Start NATS with JetStream (embedded unless --nats), provision the streams and run
    every service as its own process until Ctrl-C."""
    from cli.up import UpError, bring_up, run_demo_on_bus, wait_for_interrupt

    nats_url = given_nats(nats_flag, nats_alias)
    console = Console()
    settings = Settings.from_env(data_dir=data_dir, nats_url=nats_url)
    try:
        system = bring_up(settings, embedded=nats_url is None, console=console)
    except (UpError, OSError) as exc:
        _fail(str(exc))
        return
    try:
        live = settings.model_copy(update={"nats_url": system.nats_url})
        if demo:
            asyncio.run(run_demo_on_bus(live, console))
        if not (demo and exit_after_demo):
            wait_for_interrupt(system, console, live)
    except UpError as exc:
        _fail(str(exc))
    finally:
        console.print("stopping …")
        system.stop()


@app.command()
def serve(
    service: str = typer.Argument(..., help=f"Which service to run: {', '.join(WORKERS)}."),
    nats_url: str | None = nats_option(),
) -> None:
    """Run one service in the foreground (configuration from REMINDERS_* variables)."""
    from services.adapters.logs import configure_logging

    configure_logging()
    settings = Settings.from_env(nats_url=nats_url)
    if service not in WORKERS:
        _fail(f"unknown service {service!r}; choose one of: {', '.join(WORKERS)}")
    from services.runtime import serve as serve_worker

    try:
        serve_worker(WORKERS[service].factory(settings), settings)
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # one readable line instead of a traceback
        _fail(f"{service} stopped: {type(exc).__name__}: {exc}")


@app.command()
def schemas(
    check: bool = typer.Option(False, "--check", help="Exit 1 if the checked-in files are stale."),
) -> None:
    """Regenerate the JSON Schema files of every wire model into contracts/schemas/."""
    from contracts.schema_gen import SCHEMA_DIR, render_schemas, write_schemas

    if check:
        stale = [
            name
            for name, text in render_schemas().items()
            if not (SCHEMA_DIR / name).exists()
            or (SCHEMA_DIR / name).read_text(encoding="utf-8") != text
        ]
        if stale:
            _fail(f"stale schema files: {', '.join(stale)} (run `reminders schemas`)")
        typer.echo("schemas are up to date")
        return
    for path in write_schemas():
        typer.echo(str(path))


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


@app.command()
def provision(
    nats_url: str | None = nats_option(),
) -> None:
    """Create or update every stream, the projection bucket and every worker's durable
    consumer (idempotent; needs JetStream admin rights). Services only check what it made."""
    from cli.provision import provision_all
    from cli.tenant import tenants_line
    from services.adapters.connection import CLI_CONNECT_TIMEOUT_S, NatsUnreachable, connect
    from services.adapters.jetstream import JetStreamApiError
    from services.adapters.provisioning import ProvisionError

    settings = Settings.from_env(nats_url=nats_url)
    tenants = tenants_line(settings)  # tenants (SPEC §10.1): a bad tenants file fails here

    async def run() -> dict[str, str]:
        nc = await connect(
            settings, "reminders-provision", startup_timeout_s=CLI_CONNECT_TIMEOUT_S, fail_fast=True
        )
        try:
            return await provision_all(nc, settings)
        finally:
            await nc.drain()

    try:
        done = asyncio.run(run())
    except (NatsUnreachable, ProvisionError, JetStreamApiError) as exc:
        _fail(str(exc))
        return
    for name, what in done.items():
        Console().print(f"{name}: {what}")
    Console().print(tenants, highlight=False)


@app.command()
def doctor(
    nats_url: str | None = nats_option(),
    nats_alias: str | None = nats_url_alias(),
) -> None:
    """Check connectivity, stream and bucket configuration, consumer lag per worker and the
    dead-letter stream; exit 1 with a row per failure."""
    from rich.table import Table

    from cli.doctor import PROVISION_HINT, run_checks

    settings = Settings.from_env(nats_url=nats_url or nats_alias)
    checks = asyncio.run(run_checks(settings))
    if not checks[0].ok:  # not connected, so nothing else was checked: one line, no table
        _fail(checks[0].detail)  # "cannot reach NATS at URL: <cause>", or "invalid NATS URL …"
    table = Table(title=f"reminders doctor: {settings.nats_url}")
    for column in ("check", "status", "detail"):
        table.add_column(column)
    for check in checks:
        table.add_row(
            check.name, "[green]ok[/green]" if check.ok else "[red]FAIL[/red]", check.detail
        )
    Console().print(table)
    failures = [check for check in checks if not check.ok]
    if failures:
        missing = any(PROVISION_HINT in c.detail for c in failures)
        hint = "; run `reminders provision` to create what is missing" if missing else ""
        _fail(f"{len(failures)} check(s) failed: {', '.join(c.name for c in failures)}{hint}")


@app.command()
def asyncapi(
    check: bool = typer.Option(
        False, "--check", help="Exit 1 if contracts/asyncapi.json is stale."
    ),
) -> None:
    """Regenerate the AsyncAPI document of every subject into contracts/asyncapi.json."""
    from cli.asyncapi import ASYNCAPI_PATH, render_asyncapi, write_asyncapi

    if check:
        current = ASYNCAPI_PATH.read_text(encoding="utf-8") if ASYNCAPI_PATH.exists() else ""
        if current != render_asyncapi():
            _fail("contracts/asyncapi.json is stale (run `reminders asyncapi`)")
        typer.echo("asyncapi is up to date")
        return
    typer.echo(str(write_asyncapi()))


@app.command(name="mcp")
def mcp_server(
    nats_url: str | None = nats_option(),
    nats_alias: str | None = nats_url_alias(),
) -> None:
    """Serve the ledger to MCP hosts on stdio: tools to inject, clear and revoke reminders
    and to read a session's state and pending injections (ledger errors are tool errors)."""
    from cli.mcp_server import serve_stdio
    from services.adapters.connection import NatsUnreachable
    from services.adapters.logs import configure_logging

    configure_logging("WARNING")  # JSON lines on stderr; stdout is the MCP protocol's
    settings = Settings.from_env(nats_url=nats_url or nats_alias)
    try:
        asyncio.run(serve_stdio(settings))
    except NatsUnreachable as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        pass


def _register_audit_commands() -> None:
    from cli.audit import register
    from cli.stats import register as register_stats

    register(app)
    register_stats(app)


_register_audit_commands()
app.command(name="tail")(tail_command)
app.add_typer(hook_app, name="hook")
register_tenant_commands(app)  # tenants (SPEC §10.1): `tenant add|list|remove`, `forget`


def _tidy_help(typer_app: typer.Typer) -> None:
    """Help that reads well at 80 columns.

    The command list shows each command's first docstring paragraph with its source line
    breaks kept, so a sentence broke mid-way; give each command that paragraph as one line
    (`short_help`). And show flags as flags: this typer labels every boolean `<bool>`.
    """
    import inspect

    from typer.core import TyperOption

    for info in typer_app.registered_commands:
        if info.short_help is None and info.callback is not None:
            doc = inspect.cleandoc(info.callback.__doc__ or "")
            info.short_help = " ".join(doc.split("\n\n")[0].split())
    if not getattr(TyperOption.display_type_rich, "_flags_bare", False):
        shown = TyperOption.display_type_rich

        def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
            return None if self.is_flag else shown(self, ctx)

        display_type_rich._flags_bare = True  # type: ignore[attr-defined]
        TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign,assignment]


_tidy_help(app)


def main() -> None:
    """Console-script entrypoint."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
