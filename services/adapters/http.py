"""The HTTP endpoint of every service: `/healthz`, `/readyz`, `/metrics` (SPEC §6.1).

Served by aiohttp's web server (its llhttp parser, keep-alive, timeouts and HEAD handling)
rather than a parser of our own. It runs inside the worker's event loop through aiohttp's
`AppRunner`/`TCPSite`, which install no signal handlers — the runtime owns SIGTERM — and
report the bound address, so port 0 works.

Quiet by default: no access log. With `access_log=True` each request is one line carrying
only the method, the path (never the query string) and the status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from services.adapters.telemetry import metrics_text

Probe = Callable[[], bool]

#: The content type of the Prometheus text exposition format 0.0.4.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _MethodPathStatusLogger(AbstractAccessLogger):
    """One line per request: method, path without its query, status — nothing else."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        self.logger.info(f"{request.method} {request.path} {response.status}")


class HealthServer:
    """Serves liveness, readiness and Prometheus metrics on one port."""

    def __init__(
        self,
        host: str,
        port: int,
        ready: Probe,
        alive: Probe | None = None,
        *,
        access_log: bool = False,
    ) -> None:
        self._host = host
        self._port = port
        self._ready = ready
        self._alive = alive or (lambda: True)
        self._access_log = access_log
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._runner is not None and self._runner.addresses, "not started"
        return int(self._runner.addresses[0][1])

    async def start(self) -> None:
        """Listen."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=logging.getLogger("reminders.http.access") if self._access_log else None,
            access_log_class=_MethodPathStatusLogger,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def stop(self) -> None:
        """Stop listening and close open connections."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _healthz(self, _request: web.Request) -> web.Response:
        ok = self._alive()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "unhealthy\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        ok = self._ready()
        return web.Response(status=200 if ok else 503, text="ready\n" if ok else "not ready\n")

    async def _metrics(self, _request: web.Request) -> web.Response:
        response = web.Response(status=200, body=metrics_text())
        response.headers["Content-Type"] = METRICS_CONTENT_TYPE
        return response
