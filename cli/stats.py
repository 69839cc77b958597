"""`reminders stats`: the effect report of SPEC §12.6 over one session or every session,
from NATS or an export. Errors are one line; reading many sessions shows a progress bar on
stderr, so stdout carries only the report."""

from __future__ import annotations

import io
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from cli.audit import (
    GATEWAY_OPTION,
    STREAM_HELP,
    TENANT_OPTION,
    _credentials,
    audit_scope,
    fail,
    one_source,
    progress_bar,
    run,
    via_gateway,
    write_output,
)
from cli.options import NATS_ENV, nats_option
from contracts.spec import utc_millis
from contracts.stored import StoredEvent
from contracts.subjects import DEFAULT_STREAM
from replay.errors import ReplayError
from replay.gateway_source import GatewaySource
from replay.scope import AuditScope
from replay.source import (
    EVENT_FILTER,
    connect_for_replay,
    iterate_stream,
    require_stream,
    rows_from_file,
    rows_from_nats,
)
from replay.stats import EffectReport, effect_report, sessions_of
from replay.stats_html import row_name, stats_html


class StatsFormat(StrEnum):
    """Output formats of `stats`."""

    table = "table"
    json = "json"
    html = "html"


def table_text(report: dict[str, Any]) -> str:
    """The report as a terminal table (rows, then the totals)."""
    table = Table(title=f"Reminder effect over {report['sessions']} session(s)")
    for column in (
        "source · provider · tag",
        "injected",
        "rendered",
        "tokens",
        "withheld shed/muted/not_yet",
        "acted/ignored/dismissed",
        "expired unack.",
        "median turns to ack",
    ):
        table.add_column(column)

    def cells(counts: dict[str, Any]) -> list[str]:
        withheld, acks = counts["withheld"], counts["acknowledged"]
        median = counts["median_turns_to_ack"]
        return [
            str(counts["injected"]),
            str(counts["rendered"]),
            str(counts["est_tokens"]),
            f"{withheld['shed']}/{withheld['muted']}/{withheld['not_yet']}",
            f"{acks['acted']}/{acks['ignored']}/{acks['dismissed']}",
            str(counts["expired_unacknowledged"]),
            "—" if median is None else str(median),
        ]

    for row in report["rows"]:
        table.add_row(row_name(row), *cells(row))
    table.add_row("all reminders", *cells(report["totals"]), style="bold")
    buffer = io.StringIO()
    Console(file=buffer, width=160).print(table)
    return buffer.getvalue()


async def _sessions_via(session_id: str | None, source: GatewaySource) -> list[list[StoredEvent]]:
    """The sessions to count, read through the gateway (a tenant auditor's way)."""
    if session_id is not None:
        return [await source.rows(session_id)]
    return list(sessions_of(await source.all_rows()).values())


def _sessions(
    session_id: str | None,
    from_file: Path | None,
    nats_url: str | None,
    stream: str,
    scope: AuditScope,
) -> list[list[StoredEvent]]:
    if from_file is not None:
        try:
            rows = rows_from_file(from_file, session_id)
        except ReplayError as exc:
            fail(str(exc))
        return list(sessions_of(scope.rows(rows)).values())
    assert nats_url is not None

    async def read() -> list[list[StoredEvent]]:
        nc = await connect_for_replay(nats_url, _credentials())
        try:
            await require_stream(nc, stream)
            if session_id is not None:
                return [await rows_from_nats(nc, stream, session_id)]
            with progress_bar("reading") as update:
                rows = [
                    row async for row in iterate_stream(nc, stream, EVENT_FILTER, progress=update)
                ]
            return list(sessions_of(scope.rows(rows)).values())
        finally:
            await nc.close()

    return [rows for rows in run(read) if rows]


def stats_command(
    session_id: str | None = typer.Argument(None, help="One session (or --all)."),
    all_sessions: bool = typer.Option(False, "--all", help="Every session of the log."),
    since: str | None = typer.Option(
        None, "--since", help="Count only events at or after this RFC 3339 time."
    ),
    from_file: Path | None = typer.Option(None, "--from", help="Read an exported JSON Lines file."),
    output_format: StatsFormat = typer.Option(
        StatsFormat.table, "--format", help="table, json (SPEC §12.6 shape) or html (a chart)."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write here instead of stdout."
    ),
    nats_flag: str | None = nats_option(
        f"NATS server to read from (env {NATS_ENV}); --from FILE wins over the environment."
    ),
    stream: str = typer.Option(
        DEFAULT_STREAM, "--stream", envvar="REMINDERS_STREAM", help=STREAM_HELP
    ),
    tenant: str | None = TENANT_OPTION,
    through_gateway: bool = GATEWAY_OPTION,
) -> None:
    """Which reminders work and which only cost tokens: per source, provider and tag."""
    if (session_id is None) == (not all_sessions):
        fail("name one SESSION or pass --all")
    scope = audit_scope(tenant)  # tenants (SPEC §10.1)
    given = session_id
    if session_id is not None:
        session_id = scope.session_id(session_id)
    nats_url = one_source(from_file, nats_flag)
    if through_gateway and nats_url is None:
        fail("--through-gateway reads from NATS: give --nats URL, not --from FILE")
    try:
        since_utc = None if since is None else utc_millis(since)
    except ValueError as exc:
        fail(f"--since {since[:60]!r}: {exc}" if since else str(exc))
        return
    if through_gateway:
        assert nats_url is not None
        read = partial(_sessions_via, given)
        sessions = [rows for rows in via_gateway(nats_url, scope, read) if rows]
    else:
        sessions = _sessions(session_id, from_file, nats_url, stream, scope)
    if session_id is not None and not any(sessions):
        fail(f"unknown session {session_id!r}: no events")
    try:
        if len(sessions) > 1:
            with progress_bar("counting") as update:
                report: EffectReport = effect_report(sessions, since_utc, update)
        else:
            report = effect_report(sessions, since_utc)
    except ReplayError as exc:
        fail(str(exc))
        return
    data = report.to_json()
    if output_format is StatsFormat.json:
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    elif output_format is StatsFormat.html:
        what = f"session {session_id}" if session_id is not None else "every session"
        text = stats_html(data, f"Reminder effect: {what}")
    else:
        text = table_text(data)
    write_output(text, output)


def register(app: typer.Typer) -> None:
    """Add `stats` to the `reminders` app."""
    app.command("stats")(stats_command)
