"""Failing over from a server that cannot reach a stream leader.

A gateway connected to a node cut off from the rest of its cluster keeps its connection: the
node answers pings, but no commit can be acknowledged until the partition heals, since the
stream's leader (or the quorum to elect one) is on the other side. nats-py reconnects only
when the connection breaks, so the gateway watches its commits instead: when no commit has
been acknowledged for longer than `failover_after_s` while commits kept failing for want of
a leader (no responders, no answer, "JetStream system temporarily unavailable"), it drops
the connection and reconnects to another server of `REMINDERS_NATS_URL`'s list (or one the
cluster advertised). The default, 10 s, is longer than nats-server's longest election timeout
(9 s), so an ordinary leader election never moves a gateway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nats.aio.client import Client

log = logging.getLogger("reminders.gateway")

#: How often a fail-over tries another server when the shuffled pool gave back the same one.
FAILOVER_TRIES = 5
#: How long a fail-over waits for each reconnection.
RECONNECT_WAIT_S = 10.0


class LeaderWatch:
    """Decides, from commit outcomes alone, when the server has had no reachable stream
    leader for longer than `after_s` (0: never)."""

    def __init__(self, after_s: float, clock: Callable[[], float]) -> None:
        self._after_s = after_s
        self._clock = clock
        self._since: float | None = None  # first leaderless commit since the last success

    def answered(self) -> None:
        """A commit got an answer from a leader (a PubAck, or a conflict): all is well."""
        self._since = None

    def leaderless(self) -> bool:
        """A commit found no leader; True when it is time to fail over (then the count
        starts again, so the next server gets as long before it is left in turn)."""
        if self._after_s <= 0:
            return False
        now = self._clock()
        if self._since is None:
            self._since = now
            return False
        if now - self._since < self._after_s:
            return False
        self._since = now
        return True


class Failover:
    """Feeds a `LeaderWatch` and reconnects the connection elsewhere when it says so."""

    def __init__(self, nc: Client, after_s: float) -> None:
        self._nc = nc
        self.watch = LeaderWatch(after_s, asyncio.get_running_loop().time)
        self._task: asyncio.Task[None] | None = None
        self.failovers = 0

    def answered(self) -> None:
        """A commit was answered by a leader."""
        self.watch.answered()

    def leaderless(self) -> None:
        """A commit found no leader; fail over (in the background) once that lasted."""
        if self.watch.leaderless() and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._reconnect_elsewhere(), name="failover")

    async def stop(self) -> None:
        """Stop a fail-over in progress."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _reconnect_elsewhere(self) -> None:
        left = _server(self._nc)
        log.warning("no stream leader reachable; reconnecting elsewhere", extra={"server": left})
        self.failovers += 1
        for _ in range(FAILOVER_TRIES):
            await self._nc.force_reconnect()
            if not await _reconnected(self._nc):
                return  # still reconnecting: nats-py keeps trying the pool on its own
            if _server(self._nc) != left:
                log.warning("reconnected", extra={"server": _server(self._nc)})
                return
            # nats-py shuffles the pool before it reconnects: it may pick the same server.


def _server(nc: Client) -> str:
    url = nc.connected_url
    return url.netloc if url is not None else ""


async def _reconnected(nc: Client) -> bool:
    loop = asyncio.get_running_loop()
    until = loop.time() + RECONNECT_WAIT_S
    while loop.time() < until:
        if nc.is_connected:
            return True
        await asyncio.sleep(0.05)
    return False
