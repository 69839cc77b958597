"""The audit commands: `reminders replay`, `export`, `rebuild`, `verify-projection`.

Errors are one readable line on stderr and a non-zero exit; long reads show a progress bar
on stderr, so stdout carries only the output asked for.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import typer
from nats.aio.client import Client
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cli.options import NATS_ENV, given_nats, nats_option, resolve_nats
from contracts.agent_events import RuntimeEvent
from contracts.stored import StoredEvent
from contracts.subjects import (
    DEFAULT_AGENT_EVENTS_STREAM,
    DEFAULT_BUCKET,
    DEFAULT_STREAM,
    session_token,
)
from contracts.tenants import DEFAULT_TENANT
from core import canonical_json
from core.providers import ProvidersConfigError
from replay.engine import Cut, replay
from replay.errors import ReplayError
from replay.fold_store import DEFAULT_CACHE_SESSIONS
from replay.gateway_source import GatewaySource, verify_through_gateway
from replay.report import html_report, text_report
from replay.runtime_events import runtime_events_from_file, runtime_events_from_nats
from replay.scope import AuditScope, ScopeError
from replay.source import (
    EVENT_FILTER,
    connect_for_replay,
    iterate_stream,
    require_bucket,
    require_stream,
    rows_from_file,
    rows_from_nats,
)
from replay.verify import ProvidersVerdict, verify, verify_providers
from services.adapters.jetstream import JetStreamApiError
from services.adapters.plugins import load_providers_config

T = TypeVar("T")
stderr = Console(stderr=True)

STREAM_HELP = "Event stream name."


class Format(StrEnum):
    """Output formats of `replay`."""

    json = "json"
    text = "text"
    html = "html"


def _credentials() -> dict[str, Any]:
    """NATS credentials from REMINDERS_NATS_* variables (the auditor's own user)."""
    from services.adapters.credentials import nats_kwargs
    from services.adapters.settings import Settings

    return nats_kwargs(Settings.from_env())


def fail(message: str, code: int = 1) -> None:
    """One line on stderr, then exit."""
    stderr.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


TENANT_OPTION: Any = typer.Option(
    None,
    "--tenant",
    help="Audit one tenant's sessions (ids as its hosts know them); default: the fleet.",
)


GATEWAY_OPTION: Any = typer.Option(
    False,
    "--through-gateway",
    help="Read through the gateway, as a tenant's auditor (`T_auditor`) may: the tenant of "
    "--tenant (else `default`); the output is the fleet auditor's direct read's.",
)


def via_gateway(
    nats_url: str, scope: AuditScope, read: Callable[[GatewaySource], Awaitable[T]]
) -> T:
    """`read` through the gateway on the scope's tenant's subjects (SPEC §10.1), with the
    caller's own credentials; errors are one line."""

    async def go() -> T:
        nc = await connect_for_replay(nats_url, _credentials())
        try:
            return await read(GatewaySource(nc, scope.tenant or DEFAULT_TENANT))
        finally:
            await nc.close()

    return run(go)


def audit_scope(tenant: str | None) -> AuditScope:
    """The scope of `--tenant`, or one line and exit 1 for a bad name."""
    try:
        return AuditScope.of(tenant)
    except ScopeError as exc:
        fail(str(exc))
        raise  # unreachable: fail exits


def run(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine, turning `ReplayError` into one readable line."""
    import nats

    try:
        return asyncio.run(make())  # type: ignore[arg-type]
    except ReplayError as exc:
        fail(str(exc))
    except nats.js.errors.BucketNotFoundError:
        fail("the projection bucket does not exist: run `reminders provision` to create it")
    except (nats.errors.Error, JetStreamApiError) as exc:
        # Never a traceback: say what the server answered, in one line.
        fail(
            f"NATS answered {type(exc).__name__}: {str(exc)[:200]} (is the server provisioned? "
            "`reminders provision` creates the streams and bucket)"
        )
    raise AssertionError("unreachable")


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr; yields an `update(done, total)` callback."""
    with stage_bars(bar=description) as update:
        yield lambda done, total: update("bar", done, total)


@contextmanager
def stage_bars(**descriptions: str) -> Iterator[Callable[[str, int, int], None]]:
    """Rich progress bars on stderr, one per stage of a long job (named by keyword, shown
    in that order); yields `update(stage, done, total)`.

    Only on a terminal: redirected, rich would leave a blank line on stderr (even a transient
    bar does), and a log file has no use for a bar.
    """
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        disable=not stderr.is_terminal,
    ) as progress:
        tasks = {stage: progress.add_task(text, total=None) for stage, text in descriptions.items()}

        def update(stage: str, done: int, total: int) -> None:
            progress.update(tasks[stage], completed=done, total=max(total, done))

        yield update


CACHE_HELP = (
    "Sessions each folding process holds in memory at once; the rest wait in a temporary "
    "file, so memory stays bounded whatever the stream's size."
)
WORKERS_HELP = (
    "Processes folding sessions at once, each with its own cache (default: one per core, "
    "at most 4; a stream under 50,000 events is folded in this process)."
)


def write_output(text: str, output: Path | None) -> None:
    """To a file (exact bytes) or stdout."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        output.write_bytes(text.encode("utf-8"))
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror}")


def one_source(from_file: Path | None, nats_flag: str | None) -> str | None:
    """The NATS URL to read from, or None to read `from_file` (which must exist).

    A file wins over REMINDERS_NATS_URL; two sources on the command line, or none at all, are
    refused (the log has two kinds of source, so a reader never guesses one)."""
    if from_file is not None and nats_flag is not None:
        fail("give exactly one source: --nats URL or --from FILE")
    nats_url = None if from_file is not None else given_nats(nats_flag)
    if from_file is None and nats_url is None:
        fail(f"give exactly one source: --nats URL (or {NATS_ENV}) or --from FILE")
    if from_file is not None and not from_file.exists():
        fail(f"no such file: {from_file}")
    return nats_url


def replay_command(
    session_id: str = typer.Argument(..., help="The session to reconstruct."),
    nats_flag: str | None = nats_option(
        f"NATS server to read from (env {NATS_ENV}); --from FILE wins over the environment."
    ),
    from_file: Path | None = typer.Option(None, "--from", help="Read an exported JSON Lines file."),
    stream: str = typer.Option(
        DEFAULT_STREAM, "--stream", envvar="REMINDERS_STREAM", help=STREAM_HELP
    ),
    until_seq: int | None = typer.Option(
        None, "--until-seq", min=0, help="Stop after this session_seq."
    ),
    at_turn: int | None = typer.Option(
        None, "--at-turn", min=0, help="State right after the last event with turn <= T."
    ),
    until_time: str | None = typer.Option(
        None, "--until-time", help="Stop after the last event at or before this ISO time."
    ),
    output_format: Format = typer.Option(
        Format.json,
        "--format",
        help="json (canonical state), text (per-turn trail) or html (audit timeline).",
    ),
    check: bool = typer.Option(
        False,
        "--verify",
        help="Re-derive every decision and check the hash chain; "
        "exit 1 naming the first divergence.",
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write here instead of stdout."
    ),
    providers_config: Path | None = typer.Option(
        None,
        "--providers-config",
        envvar="REMINDERS_PROVIDERS_CONFIG",
        help="--verify: the providers TOML to re-derive evaluations with (default: defaults).",
    ),
    runtime_events_file: Path | None = typer.Option(
        None,
        "--runtime-events",
        help="--verify: runtime events as JSON Lines (with --nats they are read from "
        "AGENT_EVENTS).",
    ),
    agent_events_stream: str = typer.Option(
        DEFAULT_AGENT_EVENTS_STREAM,
        "--agent-events-stream",
        envvar="REMINDERS_AGENT_EVENTS_STREAM",
        help="--verify with --nats: the runtime event stream.",
    ),
    tenant: str | None = TENANT_OPTION,
    through_gateway: bool = GATEWAY_OPTION,
) -> None:
    """Reconstruct one session's state from its log, byte for byte, and explain it."""
    scope = audit_scope(tenant)
    given, session_id = session_id, scope.session_id(session_id)  # tenants (SPEC §10.1)
    runtime_events: dict[str, RuntimeEvent] = {}
    if runtime_events_file is not None:
        if not runtime_events_file.exists():
            fail(f"no such file: {runtime_events_file}")
        runtime_events = runtime_events_from_file(runtime_events_file)
    nats_url = one_source(from_file, nats_flag)
    if through_gateway and nats_url is None:
        fail("--through-gateway reads from NATS: give --nats URL, not --from FILE")
    if from_file is not None:
        try:
            rows = rows_from_file(from_file, session_id)
        except ReplayError as exc:
            fail(str(exc))
        where = str(from_file)
    elif through_gateway:
        assert nats_url is not None
        rows = via_gateway(nats_url, scope, lambda source: source.rows(given))
        where = "the gateway's reads"
    else:
        assert nats_url is not None

        async def read() -> list[StoredEvent]:
            nc = await connect_for_replay(nats_url, _credentials())
            try:
                await require_stream(nc, stream)
                if check and runtime_events_file is None:
                    runtime_events.update(
                        await runtime_events_from_nats(nc, agent_events_stream, session_id)
                    )
                return await rows_from_nats(nc, stream, session_id)
            finally:
                await nc.close()

        rows = run(read)
        where = f"stream {stream}"
    if not rows:
        fail(f"unknown session {session_id!r}: no events in {where}")
    try:
        # --verify runs first: a session that fails it prints no state, only the error.
        divergence = verify(rows) if check else None
        providers = ProvidersVerdict()
        if check and divergence is None:
            config = load_providers_config(providers_config)
            providers = verify_providers(rows, config, runtime_events)
            divergence = providers.problem
        if divergence is not None:
            fail(f"verify failed at {divergence}")
        result = replay(rows, Cut(until_seq, at_turn, until_time))
    except ProvidersConfigError as exc:
        fail(f"providers config: {exc}")
        return
    except ReplayError as exc:
        fail(str(exc))
        return
    for note in result.notes:
        stderr.print(f"note: {note}", highlight=False, soft_wrap=True)
    if output_format is Format.json:
        text = result.canonical
    elif output_format is Format.text:
        text = text_report(session_id, result)
    else:
        text = html_report(session_id, result)
    write_output(text, output)
    if check:
        stderr.print(
            f"verify: ok — {len(rows)} events, chain and session_seq intact, every decision "
            "re-derived",
            highlight=False,
        )
        if providers.verified or providers.unverifiable:
            missing = ", ".join(providers.unverifiable[:5])
            stderr.print(
                f"verify: {providers.verified} provider evaluation(s) re-derived"
                + (
                    f"; {len(providers.unverifiable)} not re-derivable, runtime event "
                    f"unavailable: {missing}"
                    if providers.unverifiable
                    else ""
                ),
                highlight=False,
            )


def export_command(
    session_id: str | None = typer.Argument(None, help="The session to export (or --all)."),
    all_sessions: bool = typer.Option(False, "--all", help="Export every event of the stream."),
    nats_flag: str | None = nats_option(),
    stream: str = typer.Option(
        DEFAULT_STREAM, "--stream", envvar="REMINDERS_STREAM", help=STREAM_HELP
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write here instead of stdout."
    ),
    tenant: str | None = TENANT_OPTION,
    through_gateway: bool = GATEWAY_OPTION,
) -> None:
    """Write events as JSON Lines (the envelope plus stream_seq and subject) for offline audit."""
    if (session_id is None) == (not all_sessions):
        fail("name one SESSION_ID or pass --all")
    scope = audit_scope(tenant)  # tenants (SPEC §10.1)
    given = session_id
    if session_id is not None:
        session_id = scope.session_id(session_id)
    nats_url = resolve_nats(nats_flag)
    if through_gateway:
        rows = via_gateway(
            nats_url,
            scope,
            lambda source: source.all_rows() if given is None else source.rows(given),
        )
        if session_id is not None and not rows:
            fail(f"unknown session {session_id!r}: no events through the gateway")
        write_output("".join(canonical_json(row.export()) + "\n" for row in rows), output)
        stderr.print(f"exported {len(rows)} event(s)", highlight=False)
        return

    async def read() -> list[StoredEvent]:
        nc = await connect_for_replay(nats_url, _credentials())
        try:
            await require_stream(nc, stream)
            if session_id is not None:
                return await rows_from_nats(nc, stream, session_id)
            with progress_bar("exporting") as update:
                return scope.rows(
                    [row async for row in iterate_stream(nc, stream, EVENT_FILTER, progress=update)]
                )
        finally:
            await nc.close()

    rows = run(read)
    if session_id is not None and not rows:
        fail(f"unknown session {session_id!r}: no events in stream {stream}")
    write_output("".join(canonical_json(row.export()) + "\n" for row in rows), output)
    stderr.print(f"exported {len(rows)} event(s)", highlight=False)


def rebuild_command(
    nats_flag: str | None = nats_option(),
    stream: str = typer.Option(
        DEFAULT_STREAM, "--stream", envvar="REMINDERS_STREAM", help=STREAM_HELP
    ),
    bucket: str = typer.Option(
        DEFAULT_BUCKET, "--bucket", envvar="REMINDERS_KV_BUCKET", help="Projection bucket."
    ),
    cache_sessions: int = typer.Option(
        DEFAULT_CACHE_SESSIONS, "--cache-sessions", min=1, help=CACHE_HELP
    ),
    fold_workers: int | None = typer.Option(None, "--fold-workers", min=1, help=WORKERS_HELP),
) -> None:
    """Rebuild the whole projection from the log (safe while the services run)."""
    from replay.rebuild import rebuild

    nats_url = resolve_nats(nats_flag)

    async def go() -> None:
        nc = await connect_for_replay(nats_url, _credentials())
        try:
            await require_stream(nc, stream)
            await require_bucket(nc, bucket)
            with stage_bars(
                reading="reading the log", folding="folding sessions", writing="writing sessions"
            ) as update:
                report = await rebuild(nc, stream, bucket, update, cache_sessions, fold_workers)
        finally:
            await nc.close()
        stderr.print(
            f"rebuilt {report.written} session(s); {report.unchanged} already equal; "
            f"{report.left_to_live_projector} already ahead; {report.tombstoned} forgotten; "
            f"degraded: {', '.join(report.degraded) or 'none'}"
            + (
                f"; {len(report.still_changing)} still changing under every write, left to "
                f"the live projector: {', '.join(report.still_changing)}"
                if report.still_changing
                else ""
            ),
            highlight=False,
        )

    run(go)


def verify_projection_command(
    session_id: str | None = typer.Argument(None, help="One session (default: --all)."),
    all_sessions: bool = typer.Option(False, "--all", help="Every session (the default)."),
    nats_flag: str | None = nats_option(),
    stream: str = typer.Option(
        DEFAULT_STREAM, "--stream", envvar="REMINDERS_STREAM", help=STREAM_HELP
    ),
    bucket: str = typer.Option(
        DEFAULT_BUCKET, "--bucket", envvar="REMINDERS_KV_BUCKET", help="Projection bucket."
    ),
    tenant: str | None = TENANT_OPTION,
    cache_sessions: int = typer.Option(
        DEFAULT_CACHE_SESSIONS, "--cache-sessions", min=1, help=CACHE_HELP
    ),
    fold_workers: int | None = typer.Option(None, "--fold-workers", min=1, help=WORKERS_HELP),
    through_gateway: bool = GATEWAY_OPTION,
) -> None:
    """Compare every projected state with a replay of the log; exit 1 on any mismatch."""
    from replay.rebuild import verify_projection

    if session_id is not None and all_sessions:
        fail("name one SESSION_ID or pass --all, not both")
    scope = audit_scope(tenant)  # tenants (SPEC §10.1)
    given = session_id
    if session_id is not None:
        session_id = scope.session_id(session_id)
    nats_url = resolve_nats(nats_flag)
    token = session_token(session_id) if session_id is not None else None
    if through_gateway:
        _report_verified(*via_gateway(nats_url, scope, partial(_verify_via, given)))
        return

    async def go() -> tuple[int, list[tuple[str, str]]]:
        nc = await connect_for_replay(nats_url, _credentials())
        try:
            await require_stream(nc, stream)
            await require_bucket(nc, bucket)
            if session_id is not None:
                await _require_known_session(nc, stream, bucket, session_id)
            with stage_bars(
                reading="reading the log",
                folding="folding sessions",
                checking="checking sessions",
                listing="listing the bucket",
            ) as update:
                checked, mismatches = await verify_projection(
                    nc, stream, bucket, token, update, cache_sessions, scope, fold_workers
                )
        finally:
            await nc.close()
        return checked, [(m.token, m.reason) for m in mismatches]

    _report_verified(*run(go))


def _report_verified(checked: int, mismatches: list[tuple[str, str]]) -> None:
    """verify-projection's verdict: each mismatch, then exit 1; or ok and how many."""
    for token_name, reason in mismatches:
        stderr.print(f"MISMATCH {token_name}: {reason}", highlight=False)
    if mismatches:
        fail(f"{len(mismatches)} of {checked} session(s) differ from a replay")
    stderr.print(f"ok: {checked} session(s) equal to a replay of the log", highlight=False)


async def _verify_via(
    session_id: str | None, source: GatewaySource
) -> tuple[int, list[tuple[str, str]]]:
    """verify-projection through the gateway: one named session (as the tenant's hosts name
    it; unknown is an error, as for a direct read), or every session it lists."""
    if session_id is not None:
        state = await source.projected_state(session_id)
        if not state.get("stream_seq") and not await source.rows(session_id):
            raise ReplayError(f"unknown session {session_id!r}: no events and no projection")
    ids = [session_id] if session_id is not None else await source.session_ids()
    checked, mismatches = await verify_through_gateway(source, ids)
    return checked, [(m.token, m.reason) for m in mismatches]


async def _require_known_session(nc: Client, stream: str, bucket: str, session_id: str) -> None:
    """A named session must have events or a projection; else it is an error, not `ok`."""
    import nats

    if await rows_from_nats(nc, stream, session_id):
        return
    try:
        await (await nc.jetstream().key_value(bucket)).get(session_token(session_id))
        return
    except nats.js.errors.KeyNotFoundError:
        pass
    raise ReplayError(
        f"unknown session {session_id!r}: no events in stream {stream} and no projection "
        f"in bucket {bucket}"
    )


def register(app: typer.Typer) -> None:
    """Add the audit commands to the `reminders` app."""
    app.command("replay")(replay_command)
    app.command("export")(export_command)
    app.command("rebuild")(rebuild_command)
    app.command("verify-projection")(verify_projection_command)
