"""`reminders up`: the embedded NATS (or an existing one), every service as its own process,
and optionally the demo session driven through the bus."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from rich.console import Console

from cli.demo import (
    DEMO_CHILD,
    DEMO_PROVIDERS_TOML,
    DEMO_RUNTIME_EVENTS,
    DEMO_SESSION,
    demo_script,
    print_log,
    print_projection,
    print_provider_trail,
    print_step,
)
from cli.effect_demo import run_effect_demo
from cli.embedded import EmbeddedNats, write_durable_config
from cli.provision import provision_all
from cli.supervisor import (
    ServiceProcess,
    SupervisorError,
    respawn,
    spawn_service,
    stop_all,
    wait_ready,
    write_scrape_targets,
)
from client.sdk import ReminderClient
from contracts.decode import decode
from services.adapters.connection import CLI_CONNECT_TIMEOUT_S, NatsUnreachable, connect
from services.adapters.session_read import read_session
from services.adapters.settings import Settings
from services.workers import WORKERS

#: Services `up` runs, in start order: every registered worker. Each is `reminders serve NAME`.
SERVICES: tuple[str, ...] = tuple(WORKERS)


class UpError(RuntimeError):
    """`up` could not bring the system up; the message says why."""


@dataclass
class System:
    """Everything `up` started."""

    nats_url: str
    server: EmbeddedNats | None = None
    services: list[ServiceProcess] = field(default_factory=list)
    scrape_targets: Path | None = None

    def stop(self) -> None:
        """SIGTERM every service, wait, then stop the embedded server."""
        if self.scrape_targets is not None:
            write_scrape_targets([], self.scrape_targets)
        stop_all(self.services)
        if self.server is not None:
            self.server.stop()


def bring_up(settings: Settings, *, embedded: bool, console: Console) -> System:
    """Start NATS if asked, provision, start every service, wait until all are ready."""
    server = None
    if embedded:
        store = settings.data_dir / "nats"
        server = EmbeddedNats(
            store,
            port=4222 if _port_free(4222) else None,
            config_file=write_durable_config(settings.data_dir / "nats-server.conf"),
        )
        console.print(f"starting nats-server with JetStream under {store} …")
        server.start()
        settings = settings.model_copy(update={"nats_url": server.url})
    system = System(settings.nats_url, server)
    try:
        provisioned = asyncio.run(_provision(settings))
        console.print(f"NATS at {settings.nats_url}; provisioned:", soft_wrap=True)
        for line in provision_summary(provisioned):
            console.print(f"  {line}", soft_wrap=True, highlight=False)
        system.services += spawn_workers(settings)
        wait_ready(system.services, timeout_s=30)
        system.scrape_targets = settings.data_dir / "prometheus" / "targets.json"
        write_scrape_targets(system.services, system.scrape_targets)
    except SupervisorError as exc:
        system.stop()
        raise UpError(str(exc)) from exc
    except BaseException:
        system.stop()
        raise
    for service in system.services:
        console.print(
            f"  {service.title:<11} pid {service.process.pid:<7} "
            f"http://127.0.0.1:{service.http_port}/healthz · /readyz · /metrics"
        )
    console.print(f"Prometheus targets (file_sd): {system.scrape_targets}")
    return system


def spawn_workers(settings: Settings) -> list[ServiceProcess]:
    """Every registered worker's processes (one per partition for a partitioned projector),
    in registry order, each logging to `DATA_DIR/logs/<label>.log`."""
    processes = []
    for worker in WORKERS.values():
        for process in worker.processes_for(settings):
            added = UP_ENV.get(worker.name)
            env = {**process.env, **(added(settings) if added else {})}
            log_path = settings.data_dir / "logs" / f"{process.label}.log"
            label = "" if process.label == worker.name else process.label
            processes.append(
                spawn_service(worker.name, settings, log_path, env or None, label=label)
            )
    return processes


def provision_summary(done: dict[str, str]) -> list[str]:
    """`created: REMINDERS, …` — one line per outcome, names in provisioning order."""
    by_outcome: dict[str, list[str]] = {}
    for name, what in done.items():
        by_outcome.setdefault(what, []).append(name)
    return [f"{what}: {', '.join(names)}" for what, names in by_outcome.items()]


def providers_env(settings: Settings) -> dict[str, str]:
    """`REMINDERS_PROVIDERS_CONFIG` for the providers service: the one given, else
    `DATA_DIR/providers.toml`, written with the defaults and an example rule on first run."""
    if settings.providers_config is not None or os.environ.get("REMINDERS_PROVIDERS_CONFIG"):
        return {}
    path = settings.data_dir / "providers.toml"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(DEMO_PROVIDERS_TOML, encoding="utf-8")
    return {"REMINDERS_PROVIDERS_CONFIG": str(path.resolve())}


#: What `up` adds to a worker's environment beyond the settings, by worker: the providers'
#: configuration (`up` gives them its demo rules, a deployment mounts its own).
UP_ENV: dict[str, Callable[[Settings], dict[str, str]]] = {"providers": providers_env}


async def run_provider_demo(
    settings: Settings, client: ReminderClient, console: Console
) -> list[dict[str, Any]]:
    """Publish the demo's runtime events on a new session and show what each caused."""
    nc = client.connection
    session_id = f"demo-providers-{uuid.uuid4().hex[:8]}"
    console.rule(f"[bold]providers[/bold]: runtime events on {session_id}")
    seen = 0
    shown: list[dict[str, Any]] = []
    for kind, payload, turn in DEMO_RUNTIME_EVENTS:
        event = await client.publish_runtime_event(session_id, kind, payload, turn=turn)
        events: list[dict[str, Any]] = []
        for _ in range(100):  # bounded: 10 s
            stored = await read_session(nc, settings.stream, session_id, seen)
            events = [decode(item.envelope).to_wire() for item in stored]
            if any(
                e["kind"] == "provider_evaluated"
                and e["payload"]["runtime_event_id"] == event.event_id
                for e in events
            ):
                seen = stored[-1].stream_seq
                break
            await asyncio.sleep(0.1)
        print_provider_trail(console, kind, events)
        shown.extend(events)
    state = await client.call("state", {"session_id": session_id, "timeout_ms": 10000})
    print_projection(console, session_id, state["state"], {"pendingCount": 0, "injections": []})
    return shown


def _port_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


async def _provision(settings: Settings) -> dict[str, str]:
    try:
        nc = await connect(
            settings, "reminders-up", startup_timeout_s=CLI_CONNECT_TIMEOUT_S, fail_fast=True
        )
    except NatsUnreachable as exc:
        raise UpError(str(exc)) from exc
    try:
        return await provision_all(nc, settings)
    finally:
        await nc.drain()


async def fresh_demo_ids(nc: Client, stream: str) -> tuple[str, str]:
    """The first (session, child) pair with no events yet: `demo-session`/`demo-child` on a
    new data directory, then `demo-session-2`/`demo-child-2`, … (SPEC §11: every run of
    `up --demo` drives a new session)."""
    run = 1
    while True:
        suffix = "" if run == 1 else f"-{run}"
        session, child = f"{DEMO_SESSION}{suffix}", f"{DEMO_CHILD}{suffix}"
        if not await read_session(nc, stream, session, 0) and not await read_session(
            nc, stream, child, 0
        ):
            return session, child
        run += 1


async def run_demo_on_bus(settings: Settings, console: Console) -> list[dict[str, Any]]:
    """Drive the demo script through the gateway under fresh session ids and print what the
    log recorded."""
    nc = await connect(settings, "reminders-demo")
    client = ReminderClient(nc)
    log: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    try:
        session, child = await fresh_demo_ids(nc, settings.stream)
        console.print(f"[bold]demo session: {session}[/bold] (sub-agent session {child})")
        for op, command in demo_script(session, child):
            reply = await client.request(op, command)
            session_id = command["session_id"]
            stored = await read_session(nc, settings.stream, session_id, seen.get(session_id, 0))
            events = [
                {**decode(item.envelope).to_wire(), "stream_seq": item.stream_seq}
                for item in stored
            ]
            if stored:
                seen[session_id] = stored[-1].stream_seq
            print_step(console, op, command, reply, events)
            log.extend(event for event in events if event["session_id"] == session)
        print_log(console, log, f"event log of {session} in stream {settings.stream}")
        for session_id in (session, child):
            # Queries wait until the projector has applied every event stored so far.
            state = await client.call("state", {"session_id": session_id, "timeout_ms": 10000})
            pending = await client.call("pending_injections", {"session_id": session_id})
            print_projection(console, session_id, state["state"], pending)
        await run_effect_demo(nc, client, console, session, settings.stream)
        console.print(
            f"replay it: [bold]reminders replay {session} --nats {settings.nats_url} "
            "--format text[/bold]",
            soft_wrap=True,
        )
        await run_provider_demo(settings, client, console)
    finally:
        await nc.drain()
    return log


@dataclass
class Watchdog:
    """Restarts a crashed service with backoff, as Kubernetes restarts a pod.

    A service that exits `max_crashes` times within `window_s` keeps crashing: `up` then
    gives up and says which one, rather than restarting it forever.
    """

    settings: Settings
    console: Console
    max_crashes: int = 5
    window_s: float = 60.0
    crashes: dict[str, list[float]] = field(default_factory=dict)
    due: dict[str, float] = field(default_factory=dict)
    restarts: int = 0

    def backoff_s(self, name: str) -> float:
        """0.5 s after the first crash in the window, doubling, at most 8 s."""
        return float(min(0.5 * 2 ** (len(self.crashes[name]) - 1), 8.0))

    def check(self, system: System, now: float) -> None:
        """Note new exits, restart the services whose backoff has passed."""
        for index, service in enumerate(system.services):
            name = service.title
            if name in self.due:
                if now >= self.due[name]:
                    del self.due[name]
                    system.services[index] = respawn(service, self.settings)
                    self.restarts += 1
                    self.console.print(
                        f"  {name} restarted (pid {system.services[index].process.pid}; "
                        f"{self.restarts} restart(s) so far)"
                    )
                continue
            code = service.process.poll()
            if code is None:
                continue
            recent = [t for t in self.crashes.get(name, []) if now - t < self.window_s]
            self.crashes[name] = [*recent, now]
            if len(self.crashes[name]) >= self.max_crashes:
                raise UpError(
                    f"{name} keeps crashing ({len(self.crashes[name])} exits within "
                    f"{self.window_s:.0f}s, last with {code}); see {service.log_path}"
                )
            delay = self.backoff_s(name)
            self.due[name] = now + delay
            self.console.print(
                f"[yellow]{name} exited with {code}; restarting in {delay:.1f}s[/yellow]"
            )


def wait_for_interrupt(system: System, console: Console, settings: Settings) -> None:
    """Supervise until Ctrl-C or SIGTERM (a clean stop, exit 0), or until a service keeps
    crashing (an `UpError`)."""
    stop = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    watchdog = Watchdog(settings, console)
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    console.print("[bold]running[/bold] — press Ctrl-C to stop")
    try:
        while not stop:
            watchdog.check(system, time.monotonic())
            time.sleep(0.2)
    finally:
        # A second Ctrl-C while stopping must not abandon the children half-stopped.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, previous[signal.SIGTERM])
