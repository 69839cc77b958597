"""A connection that lost its server tries the others first, in turn, and the one it left
last; a server that failed since it last answered after a wait (`LeaveStaleServer`)."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import urlparse

from nats.aio.client import Server

from services.adapters.failover import LeaveStaleServer

POOL = ["nats://a:4222", "nats://b:4222", "nats://c:4222"]


def servers(failed: frozenset[str] = frozenset()) -> list[Server]:
    return [Server(uri=urlparse(u), reconnects=int(u in failed)) for u in POOL]


def connected_to(url: str) -> SimpleNamespace:
    return SimpleNamespace(connected_url=urlparse(url))


def test_the_server_just_left_is_tried_last() -> None:
    choose = LeaveStaleServer(retry_wait_s=0.5)
    choose.connected(connected_to("nats://a:4222"))  # type: ignore[arg-type]
    picked = [choose(servers(), {})[0] for _ in range(3)]
    assert [s.uri.netloc for s in picked if s is not None] == ["b:4222", "c:4222", "a:4222"]


def test_the_turn_goes_on_from_the_server_the_pool_has_after_the_last_one() -> None:
    choose = LeaveStaleServer(retry_wait_s=0.5)
    choose.connected(connected_to("nats://c:4222"))  # type: ignore[arg-type]
    server, wait = choose(servers(), {})
    assert server is not None and server.uri.netloc == "a:4222"
    assert wait == 0.0


def test_a_server_that_failed_since_it_answered_is_tried_after_a_wait() -> None:
    choose = LeaveStaleServer(retry_wait_s=0.5)
    choose.connected(connected_to("nats://a:4222"))  # type: ignore[arg-type]
    server, wait = choose(servers(frozenset({"nats://b:4222"})), {})
    assert server is not None and server.uri.netloc == "b:4222"
    assert wait == 0.5


def test_an_unknown_last_server_starts_at_the_pool_s_first() -> None:
    choose = LeaveStaleServer(retry_wait_s=0.5)
    server, _ = choose(servers(), {})
    assert server is not None and server.uri.netloc == "a:4222"
    assert choose([], {}) == (None, 0.5)
