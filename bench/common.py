"""Shared bits of the benchmarks: an embedded server, timing, JSON output."""

from __future__ import annotations

import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats

from cli.embedded import EmbeddedNats
from cli.provision import provision_all
from cli.supervisor import ServiceProcess, spawn_service, stop_all, wait_ready
from services.adapters.settings import Settings

RESULTS = Path(__file__).parent / "results"


@contextmanager
def embedded_server() -> Iterator[EmbeddedNats]:
    """A throwaway JetStream server on loopback."""
    with tempfile.TemporaryDirectory() as directory:
        server = EmbeddedNats(Path(directory) / "store")
        server.start()
        try:
            yield server
        finally:
            server.kill()


def rate(count: int, seconds: float) -> float:
    """Operations per second, rounded."""
    return round(count / seconds, 1) if seconds > 0 else 0.0


def max_rss_mib() -> float:
    """Peak resident memory of this process in MiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def emit(name: str, result: dict[str, Any], output: Path | None = None) -> None:
    """Print the result as JSON and write it to bench/results/NAME.json (to `output` instead,
    when given: a trial run leaves the committed results alone)."""
    result = {
        "benchmark": name,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **result,
    }
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if output is None:
        RESULTS.mkdir(exist_ok=True)
        output = RESULTS / f"{name}.json"
    output.write_text(text + "\n", encoding="utf-8")


def percentile(values: list[float], fraction: float) -> float:
    """The `fraction` quantile of `values` (nearest rank), rounded to 0.01; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))
    return round(ordered[index], 2)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a live process has used so far; 0 when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU time per unit of work of each named process over one phase of a benchmark: where
    the time goes when every process shares the same cores."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._pids = pids
        self._start = {name: cpu_seconds(pid) for name, pid in pids.items()}

    def ms_per(self, count: int) -> dict[str, float]:
        """Milliseconds of CPU per unit (`count` units done since the meter started), per
        process and in `total`."""
        used = {name: cpu_seconds(pid) - self._start[name] for name, pid in self._pids.items()}
        per = {name: round(1000 * seconds / max(1, count), 3) for name, seconds in used.items()}
        return per | {"total": round(sum(per.values()), 3)}


def peak_rss_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of a live process in MiB; 0 when it cannot be read."""
    return _status_mib(pid, "VmHWM")


def rss_mib(pid: int) -> float:
    """Resident memory now (VmRSS) of a live process in MiB; 0 when it cannot be read."""
    return _status_mib(pid, "VmRSS")


def _status_mib(pid: int, field: str) -> float:
    """A memory field of `/proc/PID/status` (given in KiB) in MiB; 0 when it cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def provision_server(url: str, settings: Settings | None = None) -> None:
    """Streams, bucket and every worker's durable consumer, as `reminders provision` makes them."""
    nc = await nats.connect(url)
    try:
        await provision_all(nc, settings or Settings(nats_url=url))
    finally:
        await nc.close()


#: What every benchmark lifts on the services it starts: the gateway's per-session rate limit
#: and its in-flight bound (past which it sheds commands, answering `unavailable`). They
#: measure throughput and CPU per unit of work, not the limits: a shed command is an answer
#: without the work, and a client told to retry spends its CPU again.
UNLIMITED_ENV = {"REMINDERS_RATE_LIMIT": "1000000", "REMINDERS_MAX_IN_FLIGHT": "4096"}


@contextmanager
def running_services(
    url: str,
    names: Sequence[str],
    extra_env: dict[str, str] | None = None,
    argv: dict[str, list[str]] | None = None,
) -> Iterator[dict[str, ServiceProcess]]:
    """`reminders serve NAME` for each name, as `reminders up` spawns them, ready; stopped on
    exit, with `UNLIMITED_ENV` (`argv`: by name, a benchmark's wrapper that serves it)."""
    settings = Settings(nats_url=url)
    env = {**UNLIMITED_ENV, **(extra_env or {})}
    wrappers = argv or {}
    with tempfile.TemporaryDirectory() as logs:
        services = [
            spawn_service(name, settings, Path(logs) / f"{name}.log", env, argv=wrappers.get(name))
            for name in names
        ]
        try:
            wait_ready(services, timeout_s=60)
            yield {service.name: service for service in services}
        finally:
            stop_all(services)


def process_pids(server: EmbeddedNats, services: dict[str, ServiceProcess]) -> dict[str, int]:
    """The pid of each running service, of nats-server and of this process (the load
    generator), by the names `CpuMeter` reports them under."""
    assert server.process is not None
    pids = {name: service.process.pid for name, service in services.items()}
    return pids | {"nats-server": server.process.pid, "load": os.getpid()}


#: Runs one `reminders` command in a fresh process and reports the CPU time of it and of the
#: processes it started (the fold's workers), and the peak of their resident memory together:
#: the largest of its own VmHWM (a child's ru_maxrss would count its parent's RSS at the
#: fork) and of the sum of VmRSS over it and its descendants, sampled every 50 ms.
_MEASURED_COMMAND = """
import os, resource, sys, threading, time
from cli.main import app

def tree_rss_kib():
    total, frontier = 0, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        try:
            with open(f"/proc/{pid}/status") as status:
                total += int(next(l for l in status if l.startswith("VmRSS:")).split()[1])
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    frontier += [int(child) for child in children.read().split()]
        except (OSError, StopIteration, ValueError):
            pass  # gone meanwhile
    return total

peak_tree = 0
done = threading.Event()

def sample():
    global peak_tree
    while not done.wait(0.05):
        peak_tree = max(peak_tree, tree_rss_kib())

threading.Thread(target=sample, daemon=True).start()
try:
    app(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
else:
    code = 0
done.set()
own = resource.getrusage(resource.RUSAGE_SELF)
children = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
with open("/proc/self/status") as status:
    peak = int(next(line for line in status if line.startswith("VmHWM:")).split()[1])
print("MEASURED", cpu, max(peak, peak_tree) / 1024, file=sys.stderr)
sys.exit(code)
"""


def measured_command(args: Sequence[str], timeout_s: float) -> tuple[float, float]:
    """`reminders ARGS` in a fresh process: (CPU seconds of it and its children, peak RSS in MiB
    of it with its descendants). Raises `RuntimeError` with the end of its stderr when it
    fails."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED_COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"reminders {args[0]} failed: {done.stderr[-1000:]}")
    line = next(line for line in done.stderr.splitlines() if line.startswith("MEASURED"))
    cpu_s, peak = (float(field) for field in line.split()[1:])
    return cpu_s, peak


@contextmanager
def null_process(module: str, url: str, *flags: str) -> Iterator[subprocess.Popen[str]]:
    """`python -m MODULE URL [FLAGS]` (a null service: `bench.null_gateway`,
    `bench.null_providers`) running once it printed `ready`; stopped with SIGTERM on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, url, *flags], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{module} did not start")
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
