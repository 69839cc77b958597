"""The `reminders` command line: one entrypoint for every service and tool."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

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
    from services.demo import print_demo

    print_demo(Console(), show_log=log)


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
    Console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(1)


def main() -> None:
    """Console-script entrypoint."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
