"""Real Prometheus scraping a system started as `reminders up`: the scrape config and file_sd
targets `up` writes, the rules loading, and the command rate and p99 latency read back through
Prometheus's HTTP API (SPEC §10). Skipped only when the `prometheus` binary is absent (Debian's
`prometheus` package; `.ci/run` installs it)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from cli.embedded import free_port
from client.sdk import ReminderClient
from services.workers import WORKERS

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


@pytest.fixture
def reminders_up(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`reminders up` on its own data dir: (NATS URL, the file_sd targets file)."""
    data_dir = tmp_path / "data"
    process = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir)],
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
        yield match.group(1), data_dir / "prometheus" / "targets.json"
    finally:
        rest = stop(process)
    assert process.returncode == 0, "".join(lines) + rest


def prometheus_config(targets: Path, directory: Path) -> Path:
    """The shipped `up` config, with a 1 s scrape and evaluation interval and absolute paths."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.up.yml").read_text(encoding="utf-8"))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(PROMETHEUS_DIR / "rules.yml")]
    (job,) = config["scrape_configs"]
    (file_sd,) = job["file_sd_configs"]
    file_sd["files"] = [str(targets)]
    file_sd["refresh_interval"] = "1s"
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture
def prometheus(tmp_path: Path, reminders_up: tuple[str, Path]) -> Iterator[str]:
    """The real Prometheus on a loopback port with a temporary store: its base URL."""
    _, targets = reminders_up
    assert PROMETHEUS is not None
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={prometheus_config(targets, tmp_path)}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
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


def test_prometheus_scrapes_up_and_answers_the_command_rate_and_p99_latency(
    reminders_up: tuple[str, Path], prometheus: str
) -> None:
    nats_url, targets = reminders_up
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
