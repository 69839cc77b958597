"""`reminders tail`: watch lifecycle events as they are appended (docs/operations.md).

Reading is `replay.tail`'s (batched direct gets, no consumer: the auditor's rights suffice);
this module parses the options, prints one line (or one JSON object) per event and stops
quietly on Ctrl-C. Bad input is one line on stderr: an unknown `--kind` names every valid
kind, a bad `--since` says what it accepts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Coroutine
from contextlib import aclosing
from enum import StrEnum
from typing import Any

import orjson
import typer

from cli.audit import _credentials, fail, run
from cli.options import nats_option, resolve_nats
from contracts.subjects import DEFAULT_STREAM
from replay.source import connect_for_replay, require_stream
from replay.tail import (
    TailInputError,
    TailItem,
    TailQuery,
    as_record,
    parse_kinds,
    parse_since,
    table_header,
    table_line,
    tail_events,
)

#: Exit status after Ctrl-C (128 + SIGINT), as a shell reports an interrupted command.
INTERRUPTED = 130


class Format(StrEnum):
    """Output formats of `tail`."""

    table = "table"
    jsonl = "jsonl"


def bodies_by_default() -> bool:
    """Bodies are shown unless the deployment redacts them (REMINDERS_REDACT=1)."""
    from services.adapters.settings import Settings

    try:
        return not Settings.from_env().core.redact
    except ValueError:  # a malformed setting elsewhere: err on the side of not showing
        return False


class Printer:
    """Writes each item as it comes, flushed, so a pipe sees it at once."""

    def __init__(self, output_format: Format, *, bodies: bool, all_sessions: bool) -> None:
        self.output_format = output_format
        self.bodies = bodies
        self.all_sessions = all_sessions
        self.printed = 0

    def write(self, item: TailItem) -> None:
        """Print one item (the table's header before the first)."""
        if self.output_format is Format.jsonl:
            line = orjson.dumps(as_record(item, bodies=self.bodies)).decode()
        else:
            line = table_line(item, bodies=self.bodies, all_sessions=self.all_sessions)
            if self.printed == 0:
                line = table_header(all_sessions=self.all_sessions) + "\n" + line
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        self.printed += 1


async def until_interrupted(work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` until it ends (False) or until SIGINT or SIGTERM (True, `work` cancelled).

    The signal only sets an event, and the work is cancelled until it is done: Python 3.11's
    `asyncio.wait_for` may swallow a single cancellation that races a reply, which left a
    follower running after Ctrl-C (asyncio.run cancels once)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # its error, if any
            return False
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)
        return True
    finally:
        stopping.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def tail_command(
    session_id: str | None = typer.Argument(
        None, metavar="[SESSION]", help="The session to watch (or --all).", show_default=False
    ),
    all_sessions: bool = typer.Option(False, "--all", help="Watch every session."),
    kind: list[str] = typer.Option(
        [], "--kind", metavar="KIND", help="Only this kind (repeat, or comma-separate)."
    ),
    since: str | None = typer.Option(
        None,
        "--since",
        metavar="SEQ|ISO|now",
        help="Start at this stream sequence, at this time (ISO 8601, UTC if no offset), "
        "or `now` for new events only. Default: from the first event.",
    ),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep watching for new events until Ctrl-C."
    ),
    output_format: Format = typer.Option(
        Format.table, "--format", help="table (one readable line per event) or jsonl."
    ),
    bodies: bool | None = typer.Option(
        None,
        "--bodies/--no-bodies",
        help="Show the first words of reminder bodies (jsonl: the whole body). "
        "Default: shown, unless REMINDERS_REDACT=1.",
        show_default=False,
    ),
    nats_flag: str | None = nats_option(),
    stream: str = typer.Option(
        DEFAULT_STREAM, "--stream", envvar="REMINDERS_STREAM", help="Event stream name."
    ),
) -> None:
    """Print lifecycle events as they are appended, one line each (or JSON Lines).

    Needs only the auditor's rights: no consumer, nothing left on the server.

    With --follow it waits for new events and rides out a NATS restart."""
    if (session_id is None) == (not all_sessions):
        fail("give a SESSION or --all (not both)")
    try:
        kinds = parse_kinds(kind)
        start = parse_since(since)
    except TailInputError as exc:
        fail(f"{exc.code}: {exc}")
        return
    query = TailQuery(None if all_sessions else session_id, kinds)
    printer = Printer(
        output_format,
        bodies=bodies_by_default() if bodies is None else bodies,
        all_sessions=all_sessions,
    )
    url = resolve_nats(nats_flag)

    async def watch() -> bool:
        nc = await connect_for_replay(url, _credentials())
        try:
            await require_stream(nc, stream)
            if follow:
                what = f"session {session_id}" if session_id else "every session"
                sys.stderr.write(f"watching {what} in {stream} (Ctrl-C to stop)\n")

            async def show() -> None:
                async with aclosing(tail_events(nc, stream, query, start, follow=follow)) as items:
                    async for item in items:
                        printer.write(item)

            return await until_interrupted(show())
        finally:
            await nc.close()

    try:
        interrupted = run(watch)  # a NATS or replay error is one line, as for every command
    except KeyboardInterrupt:  # Ctrl-C while connecting
        raise typer.Exit(INTERRUPTED) from None
    except BrokenPipeError:  # `tail | head`: the reader has gone, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
    if interrupted:
        raise typer.Exit(INTERRUPTED)
    if printer.printed == 0:
        what = f"of session {session_id}" if session_id else ""
        matching = f" matching --kind {','.join(sorted(kinds))}" if kinds else ""
        sys.stderr.write(f"no events {what}{matching} in {stream}\n".replace("  ", " "))
