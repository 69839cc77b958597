"""Which server a connection tries next when it loses the one it had.

nats-py shuffles its server pool when it reconnects, so a connection that left a server
because that server stopped answering (frozen, or cut off without a reset) picks the same
server first about one time in three, and then waits a whole connect timeout for a greeting
that never comes before it tries another. A frozen node's kernel still accepts the TCP
connection, so nothing fails faster. `LeaveStaleServer` is nats-py's
`reconnect_to_server_handler`: it tries the other servers first, in turn, and the one just
left last; a server that failed since it last answered is tried after a short wait, so a
whole cluster that is down is not tried in a busy loop.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client, Server


class LeaveStaleServer:
    """A `reconnect_to_server_handler` that tries the server just left last.

    `connected(nc)` records the server a connection is on (after its first connection; the
    handler records each one it picks itself)."""

    def __init__(self, retry_wait_s: float) -> None:
        self._retry_wait_s = retry_wait_s
        self._last: str | None = None

    def connected(self, nc: Client) -> None:
        """Remember the server `nc` is connected to now."""
        url = nc.connected_url
        self._last = url.netloc if url is not None else None

    def __call__(self, servers: list[Server], _info: dict[str, Any]) -> tuple[Server | None, float]:
        """The server after the one tried last, in the pool's order, and how long to wait
        before trying it: none unless it failed since it last answered."""
        if not servers:
            return None, self._retry_wait_s
        places = [server.uri.netloc for server in servers]
        after = places.index(self._last) + 1 if self._last in places else 0
        chosen = servers[after % len(servers)]
        self._last = chosen.uri.netloc
        return chosen, (self._retry_wait_s if chosen.reconnects > 0 else 0.0)
