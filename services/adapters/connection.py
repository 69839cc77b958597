"""Connecting to NATS from settings (one place, so credentials and TLS apply everywhere).

It is also the one place that says why a first connection failed: `NatsUnreachable` names
the URL and the cause — connection refused, DNS, timeout, authorization, TLS — in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from typing import Any

import nats
from nats.aio.client import Client

from services.adapters.credentials import nats_kwargs
from services.adapters.failover import LeaveStaleServer
from services.adapters.nats_client import LedgerClient
from services.adapters.settings import Settings

log = logging.getLogger("reminders.nats")

#: How long a command-line tool waits for its first connection (SPEC §11: one line in 2 s).
CLI_CONNECT_TIMEOUT_S = 1.5
#: The least a (re)connection attempt is given to be greeted by the server.
MIN_CONNECT_ATTEMPT_S = 2.0
#: The schemes nats-py connects with.
NATS_SCHEMES = ("nats", "tls", "ws", "wss")


class NatsUnreachable(RuntimeError):
    """The first connection could not be made; the message names the URL and the cause."""

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(f"cannot reach NATS at {url}: {cause}")
        self.url = url
        self.cause = cause


class InvalidNatsUrl(NatsUnreachable):
    """The URL is no NATS URL at all (a wrong scheme, a bad port, no host): nothing was tried."""

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(url, cause)
        self.args = (f"invalid NATS URL {url}: {cause}",)


def describe_failure(exc: BaseException | None, timeout_s: float) -> tuple[str, bool]:
    """(the cause in a few words, whether retrying cannot help) of a failed first connection."""
    if exc is None or isinstance(exc, TimeoutError | nats.errors.TimeoutError):
        return f"timed out after {timeout_s:g}s (no NATS server answered)", False
    if isinstance(exc, nats.errors.AuthorizationError) or "authorization" in str(exc).lower():
        return "authorization failed (check REMINDERS_NATS_USER/_PASSWORD/_TOKEN/_CREDS_FILE)", True
    if isinstance(exc, socket.gaierror):
        return f"DNS lookup failed ({exc.strerror or exc})", True
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is nats-server running on that port?)", True
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed ({exc.reason or exc})", True
    if isinstance(exc, OSError):
        return f"{exc.strerror or type(exc).__name__}", False
    if isinstance(exc, nats.errors.NoServersError):
        return "no server answered", False
    text = str(exc).strip() or type(exc).__name__
    return text[:200], False


def url_problem(url: str) -> str | None:
    """Why `url` (one server or a comma-separated cluster) is no NATS URL, or None.

    nats-py reads `http://host:4222` as the host `http` and fails with a DNS lookup, and a
    bad port with a bare `invalid connect url option`: say what is wrong instead.
    """
    for server in server_urls(url):
        scheme = server.split("://", 1)[0].lower() if "://" in server else "nats"
        if scheme not in NATS_SCHEMES:
            return f"wrong scheme {scheme}:// (use nats://HOST:PORT, or tls://, ws://, wss://)"
        try:
            Client._parse_server_uri(server)
        except nats.errors.Error:
            return f"{server} is not HOST:PORT (use nats://HOST:PORT)"
    return None


async def connect_url(
    url: str,
    name: str,
    options: dict[str, Any] | None = None,
    *,
    startup_timeout_s: float = 10.0,
    fail_fast: bool = False,
) -> Client:
    """A connection that reconnects forever once established.

    The first connection is bounded by `startup_timeout_s`; with `fail_fast` a cause that
    retrying cannot cure (refused, DNS, authorization, TLS) ends it at once — what a
    command-line tool wants. Either way a failure is `NatsUnreachable` naming the cause.
    """
    problem = url_problem(url)
    if problem is not None:
        raise InvalidNatsUrl(url, problem)
    errors: list[BaseException] = []
    hopeless = asyncio.Event()
    connecting = True

    async def record(exc: Exception) -> None:
        if not connecting:
            await _quiet_error(exc)
            return
        errors.append(exc)
        if not fail_fast:
            await _quiet_error(exc)
        elif describe_failure(exc, startup_timeout_s)[1]:
            hopeless.set()

    nc = LedgerClient()
    moves = _Moves(nc)
    # `options` may set each attempt's own `connect_timeout`: the first connection as a
    # whole is bounded by `startup_timeout_s` all the same.
    timing: dict[str, Any] = {
        "connect_timeout": startup_timeout_s,
        "reconnect_time_wait": 0.5,
        **(options or {}),
    }
    # A server that stopped answering is tried last (see `LeaveStaleServer`).
    failover = timing.setdefault(
        "reconnect_to_server_handler", LeaveStaleServer(timing["reconnect_time_wait"])
    )
    attempt = asyncio.ensure_future(
        nc.connect(
            server_urls(url),
            name=name,
            max_reconnect_attempts=-1,
            allow_reconnect=True,
            error_cb=record,
            disconnected_cb=moves.disconnected,
            reconnected_cb=moves.reconnected,
            **timing,
        )
    )
    gave_up = asyncio.ensure_future(hopeless.wait())
    try:
        done, _ = await asyncio.wait(
            {attempt, gave_up}, timeout=startup_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        gave_up.cancel()
    connecting = False
    if attempt in done and attempt.exception() is None:
        moves.connected()
        if isinstance(failover, LeaveStaleServer):
            failover.connected(nc)
        return nc
    raise await _unreachable(nc, attempt, errors, url, startup_timeout_s)


async def _unreachable(
    nc: Client,
    attempt: asyncio.Future[None],
    errors: list[BaseException],
    url: str,
    timeout_s: float,
) -> NatsUnreachable:
    """Why the first connection failed: its own error, else the most telling one met on the
    way (a cause retrying cannot cure first); the half-open client is closed."""
    if attempt.done():
        errors.append(attempt.exception())  # type: ignore[arg-type]
    else:
        attempt.cancel()
        try:
            await attempt
        except BaseException as exc:  # the cancellation, or an error that came late
            if not isinstance(exc, asyncio.CancelledError):
                errors.append(exc)
    with contextlib.suppress(Exception):  # a half-open client; closing is best effort
        await nc.close()
    last = next(
        (e for e in reversed(errors) if describe_failure(e, timeout_s)[1]),
        errors[-1] if errors else None,
    )
    return NatsUnreachable(url, describe_failure(last, timeout_s)[0])


async def _quiet_error(exc: Exception) -> None:
    # nats-py prints a traceback by default; one line is enough, and never a payload. The
    # server's own error text (a permissions violation names the subject) carries none.
    log.warning(
        "nats connection trouble", extra={"error": type(exc).__name__, "detail": str(exc)[:200]}
    )


class _Moves:
    """Logs when a connection was lost and where it reconnected, so an operator reads when
    and where a service moved (nats-py's disconnected and reconnected callbacks)."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        #: host:port of the server the connection is on ("" before the first connection);
        #: never credentials.
        self.server = ""

    def connected(self) -> None:
        """The connection is up: remember the server (nats-py names none once it is lost)."""
        url = self._nc.connected_url
        self.server = url.netloc.rsplit("@", 1)[-1] if url is not None else ""

    async def disconnected(self) -> None:
        """Lost: a warning, unless it was closed on purpose (shutdown) or never made."""
        if self.server and self._nc.is_reconnecting:
            log.warning("nats connection lost; reconnecting", extra={"server": self.server})

    async def reconnected(self) -> None:
        """On another server, or the same one again."""
        self.connected()
        log.info("nats reconnected", extra={"server": self.server})


def server_urls(nats_url: str) -> list[str]:
    """The servers of `REMINDERS_NATS_URL`: one URL, or a cluster's as a comma-separated list
    (`nats://a:4222,nats://b:4222`), so a client fails over when the node it uses dies."""
    urls = [url.strip() for url in nats_url.split(",") if url.strip()]
    return urls or [nats_url]


async def connect(
    settings: Settings, name: str, startup_timeout_s: float = 10.0, *, fail_fast: bool = False
) -> Client:
    """A connection named after the service that reconnects forever once established, and
    that leaves a stalled server (paused, or cut off without a reset) within
    `nats_ping_interval_s` × (`nats_max_outstanding_pings` + 1) for another of the list —
    and gives each reconnection attempt no longer than that either.

    The first connection is bounded by `startup_timeout_s`, so a wrong URL fails fast; see
    `connect_url`. Command-line tools pass `fail_fast=True` and `CLI_CONNECT_TIMEOUT_S`.
    """
    stale_after_s = settings.nats_ping_interval_s * (settings.nats_max_outstanding_pings + 1)
    options = {
        **nats_kwargs(settings),
        "ping_interval": settings.nats_ping_interval_s,
        "max_outstanding_pings": settings.nats_max_outstanding_pings,
        # Each (re)connection attempt: a frozen server accepts the TCP connection (its kernel
        # does) but never greets; nats-py shuffles the pool before reconnecting, so it may
        # pick the frozen server again, and must leave it as soon as it would a stale one.
        "connect_timeout": min(startup_timeout_s, max(MIN_CONNECT_ATTEMPT_S, stale_after_s)),
    }
    return await connect_url(
        settings.nats_url,
        name,
        options,
        startup_timeout_s=startup_timeout_s,
        fail_fast=fail_fast,
    )
