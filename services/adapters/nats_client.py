"""The nats-py client every process of the service connects with: nats-py's own, with a
header parser that gives exactly what nats-py's gives, and a request that waits the same
way, each for less CPU.

Every message a consumer, a direct get or a KV read receives carries headers (a stored event
keeps the ones it was appended with: its id, the expectation, the atomic batch's; a direct
get adds stream, subject, sequence and time), and nats-py parses them per message in
`Client._parse_header_lines`. Its parser splits the block into lines and each line at its
colon in C, then checks the name for whitespace one character at a time in a Python
generator, which is most of its cost. The parser here is the same steps with that check
done by `str.split` (the same characters count as whitespace: `str.split` and `str.isspace`
share one definition), so its result is the same for any block
(`tests/unit/test_nats_client.py` checks it against nats-py's own parser, whichever version
is installed). The measurement is in `docs/scaling.md`.

A request (nats-py's "new style": one wildcard subscription for every reply, a future per
request) drew a NUID and two random bytes from the OS for its reply's token and waited with
`asyncio.wait_for`, which adds a second future, its callbacks and a timer. Here the token is
a counter (unique under the subscription's own NUID prefix) and the wait is the future
itself under one timer, cancelled when the reply comes; a reply, a timeout (nats-py's
`TimeoutError`) and no responders (`NoRespondersError`) come out as from nats-py's.

nats-py hands a subscription's messages to its callback through a queue and a task of its
own: a put, a wake-up of that task and a coroutine per message. The replies to requests,
and a `PullFlow`'s deliveries, go instead to a plain function as they are read
(`handle_at_once`): the function only resolves a future or files the message, so nothing
waits in the reading loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nats import errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger("reminders.nats")

_CRLF = b"\r\n"


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """A NATS header block (`Name: Value` per CRLF-ended line) as nats-py parses it: lines
    without a colon, names that are not ASCII or hold whitespace are skipped; names and
    values are stripped; values decoded as UTF-8 with errors replaced; the last of a
    repeated name wins."""
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        # A name with whitespace in it splits into other words than itself (an empty name
        # holds none, and nats-py keeps it).
        if key and key.split() != [key]:
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out


class LedgerClient(Client):
    """nats-py's `Client`, parsing message headers with `parse_header_lines` and sending
    requests with less work per request (`_request_new_style`)."""

    _parse_header_lines = staticmethod(parse_header_lines)

    def __init__(self) -> None:
        super().__init__()
        self._requests_sent = 0
        self._handled_at_once: dict[int, Callable[[Msg], None]] = {}
        self._reply_prefix = ""

    def handle_at_once(self, subscription: Subscription, handler: Callable[[Msg], None]) -> None:
        """Hand `subscription`'s messages to `handler` as they are read, instead of through
        its queue and task: for a handler that does not wait (it must not raise either; what
        it raises is logged). Undone by `stop_handling`, or when the subscription goes."""
        self._handled_at_once[subscription._id] = handler

    def stop_handling(self, subscription: Subscription) -> None:
        """The subscription's messages go through its queue again."""
        self._handled_at_once.pop(subscription._id, None)

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        """nats-py's, and the subscription's handler goes with it."""
        self._handled_at_once.pop(sid, None)
        super()._remove_sub(sid, max_msgs)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        handler = self._handled_at_once.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        message = self._build_message(
            sid, subject, reply, data, await self._process_headers(headers)
        )
        try:
            handler(message)
        except Exception as exc:  # the reading loop must go on: logged, never the message
            log.warning("a message handler failed", extra={"error": type(exc).__name__})

    async def _init_request_sub(self) -> None:
        """nats-py's one subscription for every reply, its replies handed over as read."""
        self._resp_map = {}
        prefix = bytearray(self._inbox_prefix)
        prefix.extend(b".")
        prefix.extend(self._nuid.next())
        prefix.extend(b".")
        self._resp_sub_prefix = prefix
        self._reply_prefix = prefix.decode()
        subscription = await self.subscribe(f"{self._reply_prefix}*", cb=self._request_sub_callback)
        self.handle_at_once(subscription, self._reply_arrived)

    def _reply_arrived(self, message: Msg) -> None:
        future = self._resp_map.get(message.subject[len(self._reply_prefix) :])
        if future is not None and not future.done():
            future.set_result(message)

    async def _request_new_style(
        self,
        subject: str,
        payload: bytes,
        timeout: float = 1,
        headers: dict[str, Any] | None = None,
    ) -> Msg:
        """nats-py's request over its one reply subscription, for less CPU: the reply's
        token is a counter (nats-py draws a NUID and two random bytes from the OS per
        request), and the time limit is one timer cancelled with the reply, not
        `asyncio.wait_for`'s second future, callbacks and timer."""
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        if not self._resp_sub_prefix:
            await self._init_request_sub()
        self._requests_sent += 1
        key = str(self._requests_sent)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Msg] = loop.create_future()
        self._resp_map[key] = future
        timer = loop.call_later(timeout, _expire, future)
        try:
            await self.publish(subject, payload, reply=self._reply_prefix + key, headers=headers)
            return await future
        finally:
            timer.cancel()
            self._resp_map.pop(key, None)


def _expire(future: asyncio.Future[Msg]) -> None:
    """A request's time ran out: nats-py's `TimeoutError`, as its own `request` raises."""
    if not future.done():
        future.set_exception(errors.TimeoutError())
