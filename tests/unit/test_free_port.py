"""`free_port` picks a port outgoing connections cannot take before a server binds it."""

from __future__ import annotations

import socket

import pytest

from cli import embedded
from cli.embedded import LISTEN_PORTS_FROM, free_port


def test_a_port_below_the_ephemeral_range_that_can_be_bound() -> None:
    low = embedded._ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert LISTEN_PORTS_FROM <= port < max(LISTEN_PORTS_FROM + 1, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))


def test_an_ephemeral_port_when_none_below_the_range_is_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    try:
        busy = taken.getsockname()[1]
        monkeypatch.setattr(embedded.random, "randrange", lambda *_: busy)
        port = free_port()
        assert port != busy
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))
    finally:
        taken.close()
