"""Real Prometheus scraping a system started as `reminders up --demo`: the scrape config and
file_sd targets `up` writes, the rules loading, the command rate and p99 latency read back
through Prometheus's HTTP API (SPEC §10), every Grafana dashboard panel's query answering with
series, and an alert that fires when the projector stops under load and clears when it
resumes. Skipped only when the `prometheus` binary is absent (Debian's `prometheus` package;
`.ci/run` installs it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from cli.embedded import free_port
from client.sdk import ReminderClient
from services.workers import WORKERS
from tests.dashboard_view import WIDTH_PX, dashboard_html, page_height
from tests.e2e.test_audit_cli import chromium
from tests.grafana_dashboard import panel_queries

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
SERVICES = set(WORKERS)
PROMETHEUS = shutil.which("prometheus")

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is absent (apt-get install prometheus; .ci/run tries to)",
)


def stop(process: subprocess.Popen[Any]) -> str:
    """SIGINT (Ctrl-C), wait, kill if it hangs; what it printed."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        out, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate(timeout=10)
    return str(out or "")


@dataclass(frozen=True)
class Up:
    """A running `reminders up`: its NATS URL, file_sd targets file and start-up output."""

    nats_url: str
    targets: Path
    output: str

    def pid_of(self, service: str) -> int:
        """The pid `up` printed for a service."""
        match = re.search(rf"^\s*{service}\s+pid (\d+)", self.output, re.MULTILINE)
        assert match, self.output
        return int(match.group(1))


@contextlib.contextmanager
def running_up(data_dir: Path, *args: str) -> Iterator[Up]:
    """`reminders up ARGS` on its own data dir until the block ends (then Ctrl-C, exit 0)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "up", *args, "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            lines.append(line)
            if "press Ctrl-C" in line or not line:
                break
        output = "".join(lines)
        assert "press Ctrl-C" in output, output
        match = re.search(r"NATS at (nats://\S+?);", output)
        assert match, output
        yield Up(match.group(1), data_dir / "prometheus" / "targets.json", output)
    finally:
        rest = stop(process)
    assert process.returncode == 0, "".join(lines) + rest


@pytest.fixture
def reminders_up(tmp_path: Path) -> Iterator[Up]:
    """`reminders up --demo`: the demo session and its providers' evaluations are in the
    metrics before Prometheus starts, so every dashboard panel has something to show."""
    with running_up(tmp_path / "data", "--demo") as up:
        yield up


def prometheus_config(targets: Path, directory: Path, rules: Path | None = None) -> Path:
    """The shipped `up` config, with a 1 s scrape and evaluation interval and absolute paths
    (and another rules file when given)."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.up.yml").read_text(encoding="utf-8"))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(rules or PROMETHEUS_DIR / "rules.yml")]
    (job,) = config["scrape_configs"]
    (file_sd,) = job["file_sd_configs"]
    file_sd["files"] = [str(targets)]
    file_sd["refresh_interval"] = "1s"
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@contextlib.contextmanager
def running_prometheus(directory: Path, targets: Path, rules: Path | None = None) -> Iterator[str]:
    """The real Prometheus on a loopback port with a temporary store: its base URL."""
    assert PROMETHEUS is not None
    port = free_port()
    log_path = directory / "prometheus.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={prometheus_config(targets, directory, rules)}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert process.poll() is None, log_path.read_text(encoding="utf-8")
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("prometheus not ready in 30 s:\n" + log_path.read_text(encoding="utf-8"))
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture
def prometheus(tmp_path: Path, reminders_up: Up) -> Iterator[str]:
    """Prometheus with the shipped rules, scraping `reminders_up`."""
    with running_prometheus(tmp_path, reminders_up.targets) as base:
        yield base


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def scalar(base: str, query: str) -> float | None:
    """The single value of an instant query, or None while it has no result."""
    result = api(base, "query", query=query)["result"]
    return float(result[0]["value"][1]) if result else None


async def drive_commands(nats_url: str, seconds: float) -> int:
    """Inject and render across a few sessions for `seconds`; how many commands were ok."""
    nc = await nats.connect(nats_url)
    client = ReminderClient(nc)
    ok = 0
    try:
        deadline = time.monotonic() + seconds
        turn = 0
        while time.monotonic() < deadline:
            replies = await asyncio.gather(
                *(client.request("inject", {"session_id": f"prom-{n}", "reminder": {"body": "x"}})
                  for n in range(8)),
                *(client.request("render", {"session_id": f"prom-{n}", "turn": turn})
                  for n in range(8)),
            )  # fmt: skip
            ok += sum(1 for reply in replies if reply.get("ok"))
            turn += 1
            await asyncio.sleep(0.05)
    finally:
        await nc.drain()
    return ok


def test_prometheus_scrapes_up_answers_the_command_rate_and_p99_and_every_dashboard_panel(
    reminders_up: Up, prometheus: str, tmp_path: Path
) -> None:
    nats_url, targets = reminders_up.nats_url, reminders_up.targets
    started = time.time()
    groups = json.loads(targets.read_text(encoding="utf-8"))
    assert {group["labels"]["service"] for group in groups} == SERVICES

    # Every service's /metrics is a healthy target within a few scrapes.
    deadline = time.monotonic() + 30
    up: dict[str, float] = {}
    while time.monotonic() < deadline:
        up = {
            sample["metric"]["service"]: float(sample["value"][1])
            for sample in api(prometheus, "query", query='up{job="reminders"}')["result"]
        }
        if set(up) == SERVICES and all(value == 1 for value in up.values()):
            break
        time.sleep(0.5)
    assert set(up) == SERVICES and all(value == 1 for value in up.values()), up

    asyncio.run(refused_commands_and_poison(nats_url))
    assert asyncio.run(drive_commands(nats_url, seconds=5)) > 0

    rate_query = 'sum(rate(reminders_commands_total{job="reminders",outcome="ok"}[30s]))'
    p99_query = (
        "histogram_quantile(0.99, sum by (le) "
        '(rate(reminders_command_latency_seconds_bucket{job="reminders"}[30s])))'
    )
    rate = p99 = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rate, p99 = scalar(prometheus, rate_query), scalar(prometheus, p99_query)
        if rate and p99 and rate > 0 and p99 > 0:
            break
        time.sleep(0.5)
    assert rate is not None and rate > 0, f"command rate {rate}"
    assert p99 is not None and 0 < p99 < 10, f"p99 command latency {p99} s"

    # The shipped rules load and evaluate without error against the live series.
    groups_loaded = api(prometheus, "rules")["groups"]
    rules = [rule for group in groups_loaded for rule in group["rules"]]
    assert {group["name"] for group in groups_loaded} == {"reminders.recording", "reminders.alerts"}
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(rule["health"] != "ok" for rule in rules):
        time.sleep(0.5)
        rules = [rule for group in api(prometheus, "rules")["groups"] for rule in group["rules"]]
    assert all(rule["health"] == "ok" for rule in rules), [
        (rule["name"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"
    ]
    recorded = scalar(prometheus, 'sum(reminders:commands:rate5m{outcome="ok"})')
    assert recorded is not None and recorded > 0

    # Every Grafana panel's query is valid PromQL and answers with series of real numbers.
    assert panel_queries(), "no dashboard panels found"
    failures = unanswered_panels(prometheus, timeout_s=30)
    assert failures == [], "\n".join(failures)
    if shutil.which("chromium") is not None:
        screenshot_dashboard(prometheus, tmp_path, started)


def screenshot_dashboard(base: str, directory: Path, start: float) -> None:
    """The dashboard drawn from this Prometheus, opened in headless Chromium; the PNG is kept
    at $REMINDERS_DASHBOARD_PNG when set (how docs/img/dashboard.png is made)."""
    page = directory / "dashboard.html"
    page.write_text(dashboard_html(base, start, time.time()), encoding="utf-8")
    png = directory / "dashboard.png"
    result = chromium(
        directory,
        f"--screenshot={png}",
        f"--window-size={WIDTH_PX},{page_height()}",
        "--hide-scrollbars",
        page.as_uri(),
    )
    assert png.exists() and png.stat().st_size > 10_000, result.stderr
    keep = os.environ.get("REMINDERS_DASHBOARD_PNG")
    if keep:
        shutil.copyfile(png, keep)


async def refused_commands_and_poison(nats_url: str) -> None:
    """What the demo never does: commands refused with an error code, and poison events the
    projector dead-letters (so the errors and dead-letter panels have series)."""
    nc = await nats.connect(nats_url)
    try:
        client = ReminderClient(nc)
        for body in ("", "   "):
            reply = await client.request(
                "inject", {"session_id": "prom-bad", "reminder": {"body": body}}
            )
            assert reply["ok"] is False, reply
        await poison(nc, 2)
    finally:
        await nc.drain()


async def poison(nc: nats.aio.client.Client, count: int) -> None:
    """`count` messages on event subjects that are not events (the projector's DLQ path)."""
    js = nc.jetstream()
    for n in range(count):
        await js.publish(f"transcript.reminder.injected.prom-poison-{n}", b"not an event")


def unanswered_panels(base: str, timeout_s: float) -> list[str]:
    """The dashboard queries that are invalid or have no series with a number, once every
    query answers or after `timeout_s` (rates need a few scrapes)."""
    failures: list[str] = []
    deadline = time.monotonic() + timeout_s
    while True:
        failures = []
        for query in panel_queries():
            try:
                result = api(base, "query", query=query.evaluable())["result"]
            except urllib.error.HTTPError as exc:  # 400: not valid PromQL
                failures.append(f"{query}: invalid ({exc.read()[:300]!r})")
                continue
            values = [float(sample["value"][1]) for sample in result]
            if not any(math.isfinite(value) for value in values):
                failures.append(f"{query}: no series with a value ({len(result)} series)")
        if not failures or time.monotonic() > deadline:
            return failures
        time.sleep(1)


#: The shipped alerts the stop-and-resume test watches, and the windows it shortens.
TEST_FOR = "1s"
TEST_DLQ_WINDOW = "15s"


def rules_with_test_timings(directory: Path) -> Path:
    """The shipped rules.yml with test-sized timings: every alert's `for` is 1 s, and the
    dead-letter alert looks back 15 s instead of 10 minutes (its expression is otherwise the
    shipped one, so what fires here is what fires in production, only sooner)."""
    rules = yaml.safe_load((PROMETHEUS_DIR / "rules.yml").read_text(encoding="utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            if "for" in rule:
                rule["for"] = TEST_FOR
            if rule["alert"] == "RemindersDeadLettersGrowing":
                assert "[10m]" in rule["expr"], rule
                rule["expr"] = rule["expr"].replace("[10m]", f"[{TEST_DLQ_WINDOW}]")
    path = directory / "rules.test-timings.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    return path


def alert_state(base: str, name: str, **labels: str) -> str:
    """`firing`, `pending` or `inactive` (not listed) for the alert with these labels."""
    for alert in api(base, "alerts")["alerts"]:
        found = alert["labels"]
        if found["alertname"] == name and all(found.get(k) == v for k, v in labels.items()):
            return str(alert["state"])
    return "inactive"


def wait_for_state(base: str, state: str, timeout_s: float, name: str, **labels: str) -> float:
    """Seconds until the alert reaches `state`; fails naming what it was instead."""
    started = time.monotonic()
    seen = "?"
    while time.monotonic() - started < timeout_s:
        seen = alert_state(base, name, **labels)
        if seen == state:
            return time.monotonic() - started
        time.sleep(0.5)
    pytest.fail(f"{name} {labels} stayed {seen}, not {state}, for {timeout_s} s")


class Load(threading.Thread):
    """Injects into a few sessions until stopped (failures are counted, never raised: the
    point is to keep writing while the projector is away)."""

    def __init__(self, nats_url: str) -> None:
        super().__init__(daemon=True)
        self.nats_url = nats_url
        self.stopping = threading.Event()
        self.ok = 0

    def run(self) -> None:
        asyncio.run(self._drive())

    async def _drive(self) -> None:
        nc = await nats.connect(self.nats_url)
        client = ReminderClient(nc, timeout_s=2)
        try:
            while not self.stopping.is_set():
                commands = [
                    client.request("inject", {"session_id": f"load-{n}", "reminder": {"body": "x"}})
                    for n in range(8)
                ]
                replies = await asyncio.gather(*commands, return_exceptions=True)
                self.ok += sum(1 for r in replies if isinstance(r, dict) and r.get("ok"))
                await asyncio.sleep(0.05)
        finally:
            await nc.drain()


def test_dead_letters_alert_fires_when_the_stopped_projector_resumes_and_clears_after(
    tmp_path: Path,
) -> None:
    with (
        running_up(tmp_path / "data") as up,
        running_prometheus(tmp_path, up.targets, rules_with_test_timings(tmp_path)) as prometheus,
    ):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            values = [s["value"][1] for s in api(prometheus, "query", query="up")["result"]]
            if len(values) == len(SERVICES) and set(values) == {"1"}:
                break
            time.sleep(0.5)
        projector = up.pid_of("projector")
        load = Load(up.nats_url)
        load.start()
        try:
            time.sleep(2)
            # The projector stops (SIGSTOP: alive, but neither applying nor answering its
            # /metrics) while commands keep coming and poison events arrive.
            os.kill(projector, signal.SIGSTOP)
            try:
                asyncio.run(publish_poison(up.nats_url, 3))
                wait_for_state(prometheus, "firing", 20, "RemindersTargetDown", service="projector")
                assert alert_state(prometheus, "RemindersDeadLettersGrowing") == "inactive"
            finally:
                os.kill(projector, signal.SIGCONT)
            # It resumes: the backlog is applied, the poison dead-lettered, and the alert
            # fires; the target is back.
            wait_for_state(prometheus, "firing", 20, "RemindersDeadLettersGrowing")
            wait_for_state(prometheus, "inactive", 10, "RemindersTargetDown", service="projector")
        finally:
            load.stopping.set()
            load.join(timeout=10)
        assert load.ok > 0
        # The three poison events may be applied in different fetches after the resume, and
        # the alert fires on the first: the count reaches 3 by a later scrape.
        deadline = time.monotonic() + 10
        dead = scalar(prometheus, "sum(reminders_dlq_messages_total)")
        while (dead is None or dead < 3) and time.monotonic() < deadline:
            time.sleep(0.5)
            dead = scalar(prometheus, "sum(reminders_dlq_messages_total)")
        assert dead == 3, dead
        # No more poison: once the window has passed, the alert is inactive again.
        wait_for_state(prometheus, "inactive", 30, "RemindersDeadLettersGrowing")


async def publish_poison(nats_url: str, count: int) -> None:
    nc = await nats.connect(nats_url)
    try:
        await poison(nc, count)
    finally:
        await nc.drain()
