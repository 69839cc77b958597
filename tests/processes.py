"""Service processes for tests, started exactly as a user would: `reminders serve NAME`."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

from cli.supervisor import ServiceProcess, spawn_service, stop_all, wait_ready
from services.adapters.settings import Settings


@dataclass
class ServiceRunner:
    """Starts and stops service processes against the test server."""

    settings: Settings
    log_dir: Path
    running: list[ServiceProcess] = field(default_factory=list)

    def start(
        self, name: str, *, wait: bool = True, extra_env: dict[str, str] | None = None
    ) -> ServiceProcess:
        """Start one service process; by default wait until it is ready."""
        log_path = self.log_dir / f"{name}-{len(self.running)}.log"
        service = spawn_service(name, self.settings, log_path, extra_env)
        self.running.append(service)
        if wait:
            try:
                wait_ready([service])
            except Exception as exc:
                raise AssertionError(f"{exc}\n{service.log()}") from exc
        return service

    def kill(self, service: ServiceProcess) -> None:
        """SIGKILL, as a crash would."""
        service.process.send_signal(signal.SIGKILL)
        service.process.wait(timeout=10)

    def stop_all(self) -> None:
        """Stop everything still running."""
        stop_all(self.running)
