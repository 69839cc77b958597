"""`free_port` picks a port outgoing connections cannot take before a server binds it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cli import embedded
from cli.embedded import LISTEN_PORTS_FROM, EmbeddedNats, EmbeddedServerError, free_port


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
        monkeypatch.setattr("cli.embedded.random.randrange", lambda *_: busy)
        port = free_port()
        assert port != busy
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))
    finally:
        taken.close()


def test_a_port_claimed_by_a_live_process_is_not_picked_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two picks racing for one port: the probe passes for both while neither server has
    bound it, so the claim is what keeps the second pick off it."""
    monkeypatch.setattr(embedded, "_reservations", lambda: tmp_path)
    first, second = _two_unheld_ports()
    picks = iter([first, first, second])
    monkeypatch.setattr("cli.embedded.random.randrange", lambda *_: next(picks))
    assert free_port() == first
    assert free_port() == second
    assert (tmp_path / str(first)).read_text(encoding="ascii") == str(os.getpid())


def _two_unheld_ports() -> tuple[int, int]:
    """Two distinct ports nobody holds a moment ago (the kernel's picks, released at once):
    fixed ones in the range `free_port` picks from may be held by the suite's own servers
    on other workers, which the probe rightly skips."""
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as one,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as two,
    ):
        one.bind(("127.0.0.1", 0))
        two.bind(("127.0.0.1", 0))
        return int(one.getsockname()[1]), int(two.getsockname()[1])


def test_a_claim_left_by_an_exited_process_is_taken_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    monkeypatch.setattr(embedded, "_reservations", lambda: tmp_path)
    (tmp_path / "30003").write_text(str(exited.pid), encoding="ascii")
    monkeypatch.setattr("cli.embedded.random.randrange", lambda *_: 30_003)
    assert free_port() == 30_003
    assert (tmp_path / "30003").read_text(encoding="ascii") == str(os.getpid())


def test_a_port_claimed_by_another_live_process_is_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(embedded, "_reservations", lambda: tmp_path)
    (tmp_path / "30004").write_text(str(os.getppid()), encoding="ascii")
    picks = iter([30_004, 30_005])
    monkeypatch.setattr("cli.embedded.random.randrange", lambda *_: next(picks))
    assert free_port() == 30_005


def test_a_server_that_cannot_bind_says_why_in_its_error(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = EmbeddedNats(tmp_path / "store", port=taken.getsockname()[1])
        with pytest.raises(EmbeddedServerError, match="address already in use"):
            server.start()


def test_a_claim_being_written_is_not_taken_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An empty claim is one another process has created and not yet written its pid to."""
    monkeypatch.setattr(embedded, "_reservations", lambda: tmp_path)
    (tmp_path / "30006").write_text("", encoding="ascii")
    picks = iter([30_006, 30_007])
    monkeypatch.setattr("cli.embedded.random.randrange", lambda *_: next(picks))
    assert free_port() == 30_007
    assert (tmp_path / "30006").read_text(encoding="ascii") == ""
