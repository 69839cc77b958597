"""The SDK sends a request again when it may have been lost on the way (a node froze with it
inside): at once when its connection was replaced, after `resend_after_s` of silence
(then sooner while silence goes on) otherwise — only a read or a command with a
`request_id`, and the first reply of any attempt is the answer."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from client.sdk import NO_RESPONDERS_RETRY_S, RESEND_AGAIN_FRACTION, ReminderClient
from contracts.errors import ReminderError


class Reply:
    def __init__(self, data: bytes) -> None:
        self.data = data


class FrozenThenLive:
    """A connection whose first `lost` requests vanish (held inside a frozen node) and
    whose later ones are answered with the attempt's number."""

    max_payload = 1 << 20
    is_connected = True

    def __init__(self, lost: int = 1) -> None:
        self.stats = {"reconnects": 0}
        self.sent: list[dict[str, Any]] = []
        self.lost = lost

    async def request(self, subject: str, data: bytes, timeout: float, **_: Any) -> Reply:
        self.sent.append(orjson.loads(data))
        attempt = len(self.sent)
        if attempt <= self.lost:
            await asyncio.sleep(timeout)
            raise NatsTimeoutError
        return Reply(orjson.dumps({"ok": True, "attempt": attempt}))


async def reconnect_after(nc: FrozenThenLive, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    nc.stats["reconnects"] += 1


async def test_a_command_with_a_request_id_is_sent_again_once_the_connection_is_replaced() -> None:
    nc = FrozenThenLive()
    client = ReminderClient(nc, timeout_s=5.0, resend_after_s=None)  # type: ignore[arg-type]
    payload = {"session_id": "s", "request_id": "r-1", "reminder": {"body": "x"}}
    moved = asyncio.create_task(reconnect_after(nc, 0.3))
    reply = await asyncio.wait_for(client.request("inject", payload), 2.0)
    await moved
    assert reply == {"ok": True, "attempt": 2}
    assert nc.sent == [payload, payload]  # the same bytes: the same request_id


async def test_a_read_is_sent_again_after_silence() -> None:
    nc = FrozenThenLive()
    client = ReminderClient(nc, timeout_s=5.0, resend_after_s=0.3)  # type: ignore[arg-type]
    reply = await asyncio.wait_for(client.request("state", {"session_id": "s"}), 2.0)
    assert reply == {"ok": True, "attempt": 2}


async def test_a_command_without_a_request_id_is_never_sent_twice() -> None:
    nc = FrozenThenLive()
    client = ReminderClient(nc, timeout_s=0.8, resend_after_s=0.2)  # type: ignore[arg-type]
    moved = asyncio.create_task(reconnect_after(nc, 0.3))
    with pytest.raises(ReminderError) as raised:
        await client.request("inject", {"session_id": "s", "reminder": {"body": "x"}})
    await moved
    assert raised.value.code == "unavailable"
    assert len(nc.sent) == 1


async def test_an_answer_to_the_first_attempt_still_counts_after_a_resend() -> None:
    class SlowFirst(FrozenThenLive):
        async def request(self, subject: str, data: bytes, timeout: float, **_: Any) -> Reply:
            self.sent.append(orjson.loads(data))
            attempt = len(self.sent)
            await asyncio.sleep(0.5 if attempt == 1 else timeout)
            return Reply(orjson.dumps({"ok": True, "attempt": attempt}))

    nc = SlowFirst()
    client = ReminderClient(nc, timeout_s=3.0, resend_after_s=0.2)  # type: ignore[arg-type]
    reply = await asyncio.wait_for(client.request("state", {"session_id": "s"}), 2.0)
    assert reply == {"ok": True, "attempt": 1}
    assert len(nc.sent) >= 2


class NobodyThenLive(FrozenThenLive):
    """A connection where no gateway is subscribed for the first `lost` requests (one is
    moving to another node): nats-py raises "no responders" at once."""

    async def request(self, subject: str, data: bytes, timeout: float, **_: Any) -> Reply:
        self.sent.append(orjson.loads(data))
        if len(self.sent) <= self.lost:
            raise NoRespondersError
        return Reply(orjson.dumps({"ok": True, "attempt": len(self.sent)}))


async def test_no_responders_is_sent_again_until_a_gateway_is_back() -> None:
    nc = NobodyThenLive(lost=3)
    client = ReminderClient(nc, timeout_s=5.0, resend_after_s=None)  # type: ignore[arg-type]
    payload = {"session_id": "s", "request_id": "r-1", "reminder": {"body": "x"}}
    started = asyncio.get_running_loop().time()
    reply = await asyncio.wait_for(client.request("inject", payload), 3.0)
    assert reply == {"ok": True, "attempt": 4}
    assert nc.sent == [payload] * 4
    # Paced, not a busy loop: one try per NO_RESPONDERS_RETRY_S.
    assert asyncio.get_running_loop().time() - started >= 3 * NO_RESPONDERS_RETRY_S


async def test_no_responders_ends_a_read_only_at_its_timeout() -> None:
    nc = NobodyThenLive(lost=1000)
    client = ReminderClient(nc, timeout_s=0.8, resend_after_s=None)  # type: ignore[arg-type]
    with pytest.raises(ReminderError) as raised:
        await client.request("state", {"session_id": "s"})
    assert raised.value.code == "unavailable"
    assert 2 <= len(nc.sent) <= 0.8 / NO_RESPONDERS_RETRY_S + 1


async def test_no_responders_to_a_command_without_a_request_id_is_answered_at_once() -> None:
    nc = NobodyThenLive(lost=1)
    client = ReminderClient(nc, timeout_s=5.0, resend_after_s=0.2)  # type: ignore[arg-type]
    with pytest.raises(ReminderError) as raised:
        await asyncio.wait_for(client.request("inject", {"session_id": "s"}), 1.0)
    assert raised.value.code == "unavailable"
    assert len(nc.sent) == 1


async def test_a_resend_on_reconnection_does_not_postpone_the_resend_on_silence() -> None:
    """The first attempt and the one sent when the connection moved are both lost (the
    gateway was still on the frozen node): the next goes `resend_after_s` after the first
    send, not after the second."""
    nc = FrozenThenLive(lost=2)
    client = ReminderClient(nc, timeout_s=5.0, resend_after_s=0.6)  # type: ignore[arg-type]
    moved = asyncio.create_task(reconnect_after(nc, 0.4))
    started = asyncio.get_running_loop().time()
    reply = await asyncio.wait_for(client.request("state", {"session_id": "s"}), 3.0)
    await moved
    assert reply == {"ok": True, "attempt": 3}
    assert asyncio.get_running_loop().time() - started < 0.9  # not 0.4 + 0.6


async def test_after_one_resend_on_silence_the_next_comes_sooner() -> None:
    """The first attempt and the resend after `resend_after_s` of silence are both lost
    (the resend went into a node that froze, through a route not yet found stale): the
    next goes a `RESEND_AGAIN_FRACTION` of `resend_after_s` later, not a whole one."""
    nc = FrozenThenLive(lost=2)
    client = ReminderClient(nc, timeout_s=5.0, resend_after_s=0.9)  # type: ignore[arg-type]
    payload = {"session_id": "s", "request_id": "r-1", "reminder": {"body": "x"}}
    started = asyncio.get_running_loop().time()
    reply = await asyncio.wait_for(client.request("inject", payload), 3.0)
    waited = asyncio.get_running_loop().time() - started
    assert reply == {"ok": True, "attempt": 3}
    assert nc.sent == [payload] * 3
    assert 0.9 * (1 + RESEND_AGAIN_FRACTION) <= waited < 1.6  # not 0.9 + 0.9


async def test_silence_resends_are_paced_until_the_timeout() -> None:
    """Nothing ever answers: one resend after `resend_after_s`, then one every
    `RESEND_AGAIN_FRACTION` of it — paced, not a busy loop — until the timeout."""
    nc = FrozenThenLive(lost=1000)
    client = ReminderClient(nc, timeout_s=2.0, resend_after_s=0.6)  # type: ignore[arg-type]
    with pytest.raises(ReminderError) as raised:
        await client.request("state", {"session_id": "s"})
    assert raised.value.code == "unavailable"
    # Sends at 0, 0.6, 0.8, 1.0, ... 1.8: at most (2.0 - 0.6) / 0.2 + 2 of them.
    assert 5 <= len(nc.sent) <= (2.0 - 0.6) / (0.6 * RESEND_AGAIN_FRACTION) + 2


async def test_a_client_that_does_not_wait_for_a_gateway_is_answered_at_once() -> None:
    nc = NobodyThenLive(lost=1)
    client = ReminderClient(nc, timeout_s=5.0, wait_for_gateway=False)  # type: ignore[arg-type]
    with pytest.raises(ReminderError) as raised:
        await asyncio.wait_for(client.request("state", {"session_id": "s"}), 1.0)
    assert raised.value.code == "unavailable"
    assert len(nc.sent) == 1
