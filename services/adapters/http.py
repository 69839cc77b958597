"""A tiny HTTP endpoint per service: `/healthz`, `/readyz`, `/metrics` (SPEC §6.1).

Three fixed GET routes do not justify a web framework; anything else is a 404.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.adapters.telemetry import metrics_text

Probe = Callable[[], bool]


class HealthServer:
    """Serves liveness, readiness and Prometheus metrics on one port."""

    def __init__(self, host: str, port: int, ready: Probe, alive: Probe | None = None) -> None:
        self._host = host
        self._port = port
        self._ready = ready
        self._alive = alive or (lambda: True)
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen."""
        self._server = await asyncio.start_server(self._serve, self._host, self._port)

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _route(self, path: str) -> tuple[int, bytes, str]:
        if path == "/healthz":
            ok = self._alive()
            return (200 if ok else 503), (b"ok\n" if ok else b"unhealthy\n"), "text/plain"
        if path == "/readyz":
            ok = self._ready()
            return (200 if ok else 503), (b"ready\n" if ok else b"not ready\n"), "text/plain"
        if path == "/metrics":
            return 200, metrics_text(), "text/plain; version=0.0.4; charset=utf-8"
        return 404, b"not found\n", "text/plain"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=5)
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (b"\r\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else "/"
            status, body, content_type = (
                self._route(path) if parts and parts[0] == "GET" else (405, b"", "text/plain")
            )
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(
                status, "Service Unavailable"
            )
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
