"""Service child processes (`reminders serve NAME`): start, probe, stop.

Used by `reminders up` and by the tests, which start services exactly as a user would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cli.embedded import free_port
from services.adapters.settings import Settings
from services.workers import WORKERS


class SupervisorError(RuntimeError):
    """A service exited or never became ready."""


@dataclass
class ServiceProcess:
    """One `reminders serve NAME` child and its probe port."""

    name: str
    http_port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    #: What it was started with beyond the settings, so a restart gets it again.
    extra_env: dict[str, str] | None = None
    #: How `up` names it when one service runs as several processes (`projector-p1`).
    label: str = ""

    @property
    def title(self) -> str:
        """The label, else the service name."""
        return self.label or self.name

    def get(self, path: str) -> tuple[int, str]:
        """HTTP GET on the service's probe port."""
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()

    def ready(self) -> bool:
        """Whether /readyz answers 200."""
        try:
            return self.get("/readyz")[0] == 200
        except OSError:
            return False

    def log(self) -> str:
        """What the service printed so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def spawn_service(
    name: str,
    settings: Settings,
    log_path: Path,
    extra_env: dict[str, str] | None = None,
    *,
    http_port: int | None = None,
    label: str = "",
    argv: Sequence[str] | None = None,
) -> ServiceProcess:
    """Start `reminders serve NAME` against `settings.nats_url`, output to `log_path`
    (`argv`: another command that serves NAME the same way, such as a benchmark's wrapper)."""
    port = http_port or free_port()
    env = {
        **os.environ,
        "REMINDERS_NATS_URL": settings.nats_url,
        WORKERS[name].http_port_env: str(port),
        "REMINDERS_STREAM": settings.stream,
        **(extra_env or {}),
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            list(argv or [sys.executable, "-m", "cli.main", "serve", name]),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return ServiceProcess(name, port, process, log_path, extra_env, label)


def respawn(service: ServiceProcess, settings: Settings) -> ServiceProcess:
    """Start an exited service again on the same probe port, appending to the same log."""
    return spawn_service(
        service.name,
        settings,
        service.log_path,
        service.extra_env,
        http_port=service.http_port,
        label=service.label,
    )


def wait_ready(services: Sequence[ServiceProcess], timeout_s: float = 30.0) -> None:
    """Block until every service answers /readyz, or raise naming the laggard."""
    deadline = time.monotonic() + timeout_s
    waiting = list(services)
    while waiting and time.monotonic() < deadline:
        for service in list(waiting):
            if service.process.poll() is not None:
                raise SupervisorError(
                    f"{service.title} exited with {service.process.returncode}; "
                    f"see {service.log_path}"
                )
            if service.ready():
                waiting.remove(service)
        if waiting:
            time.sleep(0.05)
    if waiting:
        names = ", ".join(service.title for service in waiting)
        raise SupervisorError(f"not ready after {timeout_s}s: {names}")


def stop_all(services: Sequence[ServiceProcess], timeout_s: float = 15.0) -> None:
    """SIGTERM every live service, wait, SIGKILL stragglers."""
    for service in services:
        if service.process.poll() is None:
            service.process.send_signal(signal.SIGTERM)
    for service in services:
        try:
            service.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            service.process.kill()
            service.process.wait(timeout=5)


def write_scrape_targets(services: Sequence[ServiceProcess], path: Path) -> None:
    """Write a Prometheus file_sd file: one target per service, labelled `service`.

    Written whole and renamed into place, since Prometheus watches the file. An empty
    `services` empties it (no stale targets after `up` stops).
    """
    groups = [
        {"targets": [f"127.0.0.1:{service.http_port}"], "labels": {"service": service.name}}
        for service in services
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(groups, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)
